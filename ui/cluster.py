"""The Ray cluster the app's Sweep runs on, when `NIRVANA_RAY_ADDRESS` names one (docs/SCALE.md).

Connected once per app process (`st.cache_resource`: Ray allows one connection per process, shared
by every session); None when the variable is unset, and the Sweep runs in this process as before.
"""

from __future__ import annotations

import streamlit as st

from nirvana.cluster.ray_tasks import Cluster, connect, ray_address


@st.cache_resource(show_spinner="connecting to the Ray cluster")
def _connected(address: str) -> Cluster:
    return connect(address)


def cluster() -> Cluster | None:
    """The connected cluster of `NIRVANA_RAY_ADDRESS`, or None (run in this process)."""
    address = ray_address(None)
    return None if address is None else _connected(address)
