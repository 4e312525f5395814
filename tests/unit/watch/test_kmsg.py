import subprocess
import sys
import textwrap

from gpunode.watch.kmsg import MAX_RECORD, Follower


def test_lines_are_cut_at_the_bound_and_a_partial_last_line_waits(tmp_path):
    log = tmp_path / "kmsg"
    log.write_bytes(b"a\n" + b"x" * (3 * MAX_RECORD) + b"\nb\npart")
    f = Follower(str(log))
    lines = list(f.records())
    assert [len(x) for x in lines] == [1, MAX_RECORD, 1] and lines[2] == "b"
    with open(log, "ab") as fh:
        fh.write(b"ial\n")
    assert list(f.records()) == ["partial"]
    f.close()


def test_a_burst_of_long_lines_is_read_in_bounded_memory(tmp_path):
    """64 lines of 1 MiB each: the follower's peak memory stays far below the file's size."""
    log = tmp_path / "kmsg"
    with open(log, "wb") as fh:
        for i in range(64):
            fh.write(b"4,%d,1,-;" % i + b"y" * (1 << 20) + b"\n")
    code = textwrap.dedent(
        """
        import resource, sys
        from gpunode.watch.kmsg import Follower
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        n = sum(1 for _ in Follower(sys.argv[1]).records())
        grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        print(n, grew)
        """
    )
    out = subprocess.run([sys.executable, "-c", code, str(log)], capture_output=True, text=True,
                         check=True).stdout.split()  # fmt: skip
    assert out[0] == "64" and int(out[1]) < 8 * 1024, out  # KiB: under 8 MiB for 64 MiB read
