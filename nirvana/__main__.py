"""`python -m nirvana ...`: see `nirvana.cli`."""

import sys

from nirvana.cli import main

sys.exit(main())
