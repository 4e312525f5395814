"""/dev/kmsg followed one record at a time (gpunode.nvidia.xid judges each record).

/dev/kmsg gives one record per read() (``prio,seq,usec,flags;message``, then continuation
lines), EAGAIN when it has no more (opened O_NONBLOCK), EPIPE for records the ring buffer
overwrote meanwhile (skipped), and is readable (poll) when a new record arrives. A regular
file of such records (tests, the benchmark) is read line by line, each line cut at
MAX_RECORD bytes (the rest of a longer line is skipped, never held), and "followed" by
looking again after a short sleep. Either way memory stays within one read buffer and one
record, whatever the burst.
"""

from __future__ import annotations

import errno
import os
import select
import stat
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

READ_SIZE = 65536  # larger than any record the kernel gives (read() fails EINVAL if not)
MAX_RECORD = 16384  # a kernel record's text is at most 1 KiB, its dictionary a few more
FILE_POLL_S = 0.1


class Follower:
    """``records()``: the first lines of the records available now, oldest first;
    ``wait(timeout)``: until more may be there. Raises OSError to open or read."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        self.device = stat.S_ISCHR(os.fstat(self.fd).st_mode)
        self._poll = None
        if self.device:
            self._poll = select.poll()
            self._poll.register(self.fd, select.POLLIN)
        self._partial = bytearray()
        self._cut = False  # the line being read passed MAX_RECORD: the rest is skipped

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def records(self) -> Iterator[str]:
        if self.device:
            yield from self._device_records()
        else:
            yield from self._file_lines()

    def _device_records(self) -> Iterator[str]:
        while True:
            try:
                data = os.read(self.fd, READ_SIZE)
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    continue
                if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                    return
                raise
            if not data:
                return
            yield data.split(b"\n", 1)[0][:MAX_RECORD].decode("utf-8", "replace")

    def _file_lines(self) -> Iterator[str]:
        while True:
            data = os.read(self.fd, READ_SIZE)
            if not data:
                return  # a partial last line waits for its end
            start = 0
            while start < len(data):
                end = data.find(b"\n", start)
                piece = data[start : len(data) if end < 0 else end]
                if not self._cut:
                    room = MAX_RECORD - len(self._partial)
                    self._partial += piece[:room]
                    self._cut = len(piece) > room
                if end < 0:
                    break
                line = self._partial.decode("utf-8", "replace")
                self._partial.clear()
                self._cut = False
                start = end + 1
                yield line

    def wait(self, timeout: float) -> None:
        """Until a record may be there, at most ``timeout`` seconds."""
        if self._poll is not None:
            self._poll.poll(max(0, int(timeout * 1000)))
        else:
            time.sleep(max(0.0, min(timeout, FILE_POLL_S)))
