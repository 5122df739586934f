"""Whether Triton's kernels run in its interpreter (`TRITON_INTERPRET=1`: the CPU tests), which runs no inline
PTX and no libdevice fast math, so kernels that use them take a portable path there. Read once, at import, as
Triton reads the setting."""

import os

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
