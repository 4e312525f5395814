"""How a GPU create is carried out once its spec is decided: the seam between the
create's skeleton (gpunode.launch.shim.create_gpu_container) and the process that runs
the low-level runtime. Two implementations:

* ``Local``: the process containerd (or Docker) started — the Python runtime — execs or
  spawns the low-level runtime itself and ends with its status;
* ``Conversation``: a worker of gpunode's resident service (gpunode.launch.resident); the
  sh first stage that asked it starts the runtime, so the runtime inherits the caller's
  stdio and its container's init the caller's subreaper. Each method is a line of the
  protocol (gpunode.launch.protocol).

The annotations are strings (``from __future__``): the start path does not import typing.
"""

from __future__ import annotations

import os

from . import process, protocol


class Transport:
    """The interface: what create_gpu_container asks of whoever carries the create out."""

    served_by = ""  # said after the create's summary in the runtime's log

    def exec_runtime(self, argv: list[str], names: list[str], log_file: str | None = None,
                     log_format: str = "text") -> None:  # fmt: skip
        """No GPU request after all: the low-level runtime in this create's place. Never
        returns."""
        raise NotImplementedError

    def spawn(self, argv: list[str], names: list[str], problems: list[str]):
        """Start the low-level runtime's create: (runtime path, handle for wait), or
        (None, None) with the reasons in ``problems``."""
        raise NotImplementedError

    def wait(self, handle) -> int:
        """The runtime's exit status (128+N for signal N)."""
        raise NotImplementedError

    def fail(self, message: str, log_file: str | None, log_format: str, cfg=None) -> None:
        """End the create with one error line. Never returns."""
        raise NotImplementedError

    def exit(self, status: int) -> None:
        """End the create with ``status``. Never returns."""
        raise NotImplementedError


class Local(Transport):
    """This process starts the runtime and ends with its status."""

    def exec_runtime(self, argv, names, log_file=None, log_format="text"):
        process.exec_runtime(argv, names, log_file, log_format)

    def spawn(self, argv, names, problems):
        return process.spawn(argv, names, problems)

    def wait(self, handle):
        return process.wait(handle)

    def fail(self, message, log_file, log_format, cfg=None):
        process.fail(message, log_file, log_format, cfg)

    def exit(self, status):
        process.end(status)


LOCAL = Local()


def write_line(fd: int, line: str) -> None:
    """One protocol line (a newline in ``line`` becomes a blank: a line is one answer)."""
    data = (line.replace("\n", " ") + "\n").encode()
    while data:
        data = data[os.write(fd, data) :]


class Conversation(Transport):
    """A resident worker's side: the first stage starts the runtime when told ``run``."""

    served_by = ", served by the resident service"

    def __init__(self, answers: int, status: int) -> None:
        self.answers = answers  # fd: our lines to the first stage
        self.status = status  # fd: the runtime's exit status from it
        self.changed = False  # config.json may have been written: no ``python`` answer now

    def exec_runtime(self, argv, names, log_file=None, log_format="text"):
        problems: list[str] = []
        for runtime in process.find_runtimes(names, problems):
            self.end(f"{protocol.EXEC} {runtime}")
        self.fail(process.none_runnable(names, problems), log_file, log_format)

    def spawn(self, argv, names, problems):
        self.changed = True
        for runtime in process.find_runtimes(names, problems):
            write_line(self.answers, f"{protocol.RUN} {runtime}")
            import signal

            signal.alarm(protocol.WORKER_ALARM)  # the runtime's create may take its time
            return runtime, "the first stage"
        return None, None

    def wait(self, handle):
        data = b""
        while not data.endswith(b"\n"):
            chunk = os.read(self.status, 64)
            if not chunk:  # the first stage is gone: nobody to answer
                os._exit(1)
            data += chunk
        try:
            return int(data)
        except ValueError:
            return 1

    def fail(self, message, log_file, log_format, cfg=None):
        process.record(message, log_file, log_format, cfg)
        self.end(f"{protocol.FAIL} {message}")

    def exit(self, status):
        self.end(f"{protocol.EXIT} {status}")

    def python(self):
        """Not served here: the stage's Python program does the whole job (only while
        nothing was changed)."""
        self.end(protocol.PYTHON)

    def end(self, line: str) -> None:
        write_line(self.answers, line)
        os._exit(0)
