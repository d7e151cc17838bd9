"""Process-wide tuning for a UI that shares two cores with llama.cpp."""

from __future__ import annotations

import gc
import sys

# How long a thread may keep the GIL while another waits for it (Python's
# default: 5 ms). The reply thread spends most of each token in llama.cpp,
# without the GIL, and needs it back briefly between tokens; with the default
# it waits up to 5 ms whenever the UI is drawing (chat.bench, "decode: full
# app", compares the app with a bare llama-cpp-python loop).
GIL_SWITCH_INTERVAL_S = 0.0001


def share_the_gil_quickly() -> None:
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)


def settle_startup_garbage() -> None:
    """After the first frame: the `chat` command turned the cyclic collector off
    for startup (see chat.cli.main). What startup built lives as long as the
    app: frozen, later collections skip it. Then collect again."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()
