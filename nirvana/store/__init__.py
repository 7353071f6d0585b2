"""On-disk state: cache root, content fingerprints, evaluation cache, recorded runs."""
