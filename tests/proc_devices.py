"""/proc/devices read the way NVIDIA's container toolkit reads it, for the simulator's tests
(unit: the rendering; integration: what a node and its containers show).

The toolkit (internal/info/proc/devices, used by `nvidia-ctk system create-device-nodes`
and `create-dev-char-symlinks` and for MIG cap nodes) scans every line of the file, both
sections, with Go's ``fmt.Sscanf(strings.TrimSpace(line), "%d %s", &major, &name)``, keeps
the lines where both were read (a later line of the same name wins), keeps the names that
start with "nvidia", fails with "no NVIDIA devices found" when none is left, and looks up
"nvidia" and "nvidia-frontend" as one name (the driver renamed it in the 545 branch).
This is that algorithm, written here from its description, not its code.
"""

from __future__ import annotations

import re

# Sscanf "%d %s": an optionally signed decimal integer, then (after spaces) a run of
# non-space characters.
_LINE = re.compile(r"([+-]?\d+)\s+(\S+)")


class NoNvidiaDevices(Exception):
    """The toolkit's errNoNvidiaDevices."""

    def __init__(self) -> None:
        super().__init__("no NVIDIA devices found")


def nvidia_devices(text: str) -> dict[str, int]:
    """The NVIDIA names and majors the toolkit finds in a /proc/devices text."""
    found: dict[str, int] = {}
    for line in text.split("\n"):
        match = _LINE.match(line.strip())
        if match is not None:
            found[match[2]] = int(match[1])
    nvidia = {name: major for name, major in found.items() if name.startswith("nvidia")}
    if not nvidia:
        raise NoNvidiaDevices()
    return nvidia


def get(devices: dict[str, int], name: str) -> int | None:
    """The toolkit's Devices.Get: "nvidia" and "nvidia-frontend" fall back to each other."""
    names = ["nvidia", "nvidia-frontend"] if name in ("nvidia", "nvidia-frontend") else [name]
    return next((devices[n] for n in names if n in devices), None)
