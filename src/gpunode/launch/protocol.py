"""The resident conversation's protocol, defined once: the directory and its names, the
request kinds, the answer words, the fds the sh stages hold and the timeout. The Python
side (gpunode.launch.resident) imports these names; the sh side (dispatcher.sh,
hookstage.sh and their shared fragments) gets them rendered in by gpunode.launch.firststage
(``SH``), so no word of the protocol is spelled twice.

The conversation, as both sides see it (docs/runtime.md draws it):

1. the stage checks that the service is ours and alive (``service_check.sh``: the
   directory is its own user's, not a link; the pid file names a live process whose start
   time is the one the service wrote beside its pid);
2. it makes two FIFOs, ``c.<pid>.<start>.r`` (answers) and ``c.<pid>.<start>.w`` (its
   runtime's status), holds them as fds ``FD_ANSWERS`` and ``FD_STATUS``, starts its
   watchdog (a ``sleep`` that holds the answers FIFO's write end: when it ends, a stage
   waiting for an answer reads end-of-file), and only then asks: it creates the empty file
   ``q.<kind>.<pid>.<start>.<argc>`` in the directory. A file, not a line in a shared
   FIFO: making it never blocks, whatever the service does (a stalled service once left a
   full requests FIFO blocking every create for ever);
3. the service, woken by inotify, takes the file (unlinks it) and forks a worker; the
   worker proves the caller (gpunode.launch.resident.Caller: start time, the caller's own
   fds ``FD_ANSWERS``/``FD_STATUS`` are the conversation's FIFOs, its user and mount
   namespace) before and after reading its argv, environment and working directory;
4. answers are lines: ``RUN <path>``, ``EXEC <path>``, ``EXIT <n>``, ``FAIL <line>``,
   ``PYTHON`` (the stage's Python program serves it; sent only while nothing changed).
"""

DIR = "/run/gpunode/resident"
PID_FILE = "pid"
# A request: the empty file q.<kind>.<pid>.<start>.<argc> (each number at most as long as
# below: a name that is not a request is ignored, and said once in the service's log).
REQUEST_PREFIX = "q."
CONVERSATION_PREFIX = "c."
ANSWERS_SUFFIX = ".r"
STATUS_SUFFIX = ".w"
MAX_PID_DIGITS = 10
MAX_START_DIGITS = 20
MAX_ARGC_DIGITS = 4

# Request kinds: the runtime's create, and the two hooks' first stages (HOOK_STAGES).
CREATE = "create"
HOOK = "hook"
NVHOOK = "nvhook"
KINDS = (CREATE, HOOK, NVHOOK)

# Answer words.
RUN = "run"
EXEC = "exec"
EXIT = "exit"
FAIL = "fail"
PYTHON = "python"

# The fds the stages hold during a conversation: the answers FIFO, the runtime's status
# FIFO, and (hook stages) the hook's own stdio saved while the shell's redirections stand
# in fds 0-2.
FD_ANSWERS = 8
FD_STATUS = 9
FD_STDIO = (4, 5, 6)

# How long a stage waits for the first answer (seconds; GPUNODE_RESIDENT_TIMEOUT changes
# it for one caller), and how long a worker may take to give it.
TIMEOUT = 30
# A worker never outlives a caller that stopped talking by more than this (seconds).
WORKER_ALARM = 600

# The programs a stage runs for the conversation, by path (the caller's PATH may lack
# them; where they are missing, the Python program serves).
MKFIFO = "/usr/bin/mkfifo"
SLEEP = "/bin/sleep"


def request_name(kind: str, pid: int, start: int, argc: int) -> str:
    return f"{REQUEST_PREFIX}{kind}.{pid}.{start}.{argc}"


def conversation(pid: int, start: int) -> str:
    return f"{CONVERSATION_PREFIX}{pid}.{start}"


def _numbers(parts, limits):
    """The ASCII decimal numbers ``parts``, each within its digit limit; None otherwise."""
    if len(parts) != len(limits) or not all(
        n.isascii() and n.isdigit() and len(n) <= most for n, most in zip(parts, limits, strict=True)
    ):
        return None
    return [int(n) for n in parts]


def parse_conversation(name: str):
    """(pid, start) for a conversation's FIFO name (``c.<pid>.<start>.r`` or ``.w``); None
    for any other name."""
    if not name.startswith(CONVERSATION_PREFIX) or not name.endswith(
        (ANSWERS_SUFFIX, STATUS_SUFFIX)
    ):
        return None
    parts = name[len(CONVERSATION_PREFIX) :].rsplit(".", 1)[0].split(".")
    return _numbers(parts, (MAX_PID_DIGITS, MAX_START_DIGITS))


def parse_request(name: str):
    """(kind, pid, start, argc) for a request file's name; None for any other name."""
    if not name.startswith(REQUEST_PREFIX):
        return None
    parts = name[len(REQUEST_PREFIX) :].split(".")
    if len(parts) != 4 or parts[0] not in KINDS:
        return None
    numbers = _numbers(parts[1:], (MAX_PID_DIGITS, MAX_START_DIGITS, MAX_ARGC_DIGITS))
    if numbers is None:
        return None
    pid, start, argc = numbers
    if pid < 1 or argc < 1:
        return None
    return parts[0], pid, start, argc


# What the sh templates get: each name rendered as @P_<NAME>@.
SH = {
    "P_PID_FILE": PID_FILE,
    "P_REQUEST_PREFIX": REQUEST_PREFIX,
    "P_CONVERSATION_PREFIX": CONVERSATION_PREFIX,
    "P_ANSWERS": ANSWERS_SUFFIX,
    "P_STATUS": STATUS_SUFFIX,
    "P_CREATE": CREATE,
    "P_RUN": RUN,
    "P_EXEC": EXEC,
    "P_EXIT": EXIT,
    "P_FAIL": FAIL,
    "P_PYTHON": PYTHON,
    "P_FD_ANSWERS": str(FD_ANSWERS),
    "P_FD_STATUS": str(FD_STATUS),
    "P_FD_IN": str(FD_STDIO[0]),
    "P_FD_OUT": str(FD_STDIO[1]),
    "P_FD_ERR": str(FD_STDIO[2]),
    "P_TIMEOUT": str(TIMEOUT),
    "P_MKFIFO": MKFIFO,
    "P_SLEEP": SLEEP,
}
