"""PCI bus ids of GPUs: the one parser, and the forms NVIDIA's interfaces use.

* NVML: ``00000000:07:00.0`` (8-digit domain, upper case), nvmlDeviceGetPciInfo().busId;
* the kernel's: ``0000:07:00.0`` (4-digit domain, lower case), the directory names in
  /proc/driver/nvidia/gpus.

Parsed without ``re``: the hook imports this on the container start path.
"""

from __future__ import annotations

from ..util.record import record

_HEX = frozenset("0123456789abcdefABCDEF")


def _hex(text: str, lo: int, hi: int) -> int:
    if not lo <= len(text) <= hi or not set(text) <= _HEX:
        raise ValueError(text)
    return int(text, 16)


@record(frozen=True)
class BusId:
    domain: int
    bus: int
    device: int
    function: int

    @classmethod
    def parse(cls, text: str, *, strict: bool = False) -> BusId:
        """``[domain:]bus:device.function`` in hex, any case, surrounding whitespace ignored;
        the function is 0-7. Raises ValueError.

        By default the domain is optional (1-8 digits) and bus and device have 1-2 digits,
        as users write them (``7:0.0``, ``07:00.0``, ``0000:07:00.0``). ``strict`` takes
        only what NVML and the kernel print: a 4- to 8-digit domain, 2-digit bus and device.
        """
        parts = text.strip().split(":")
        if len(parts) == 2 and not strict:
            parts.insert(0, "0")
        if len(parts) != 3:
            raise ValueError(text)
        dom, bus, rest = parts
        dev, dot, fn = rest.partition(".")
        if not dot or len(fn) != 1 or fn not in "01234567":
            raise ValueError(text)
        if strict:
            return cls(_hex(dom, 4, 8), _hex(bus, 2, 2), _hex(dev, 2, 2), int(fn))
        return cls(_hex(dom, 1, 8), _hex(bus, 1, 2), _hex(dev, 1, 2), int(fn))

    @property
    def nvml(self) -> str:
        """NVML's form: ``00000000:07:00.0``."""
        return f"{self.domain:08X}:{self.bus:02X}:{self.device:02X}.{self.function:X}"

    @property
    def procfs(self) -> str:
        """The kernel's form, the /proc/driver/nvidia/gpus directory name: ``0000:07:00.0``."""
        return f"{self.domain:04x}:{self.bus:02x}:{self.device:02x}.{self.function:x}"

    def procfs_names(self) -> list[str]:
        """Directory names the driver may give this GPU in /proc/driver/nvidia/gpus, the
        32-bit domain form first, then (for a domain that fits) the 16-bit one."""
        rest = f"{self.bus:02x}:{self.device:02x}.{self.function:x}"
        names = [f"{self.domain:08x}:{rest}"]
        if self.domain <= 0xFFFF:
            names.append(f"{self.domain:04x}:{rest}")
        return names
