import json

from gpunode.watch import history


def test_bounded_gpus_codes_and_counts(tmp_path):
    h = history.History("b")
    for i in range(history.MAX_GPUS + 5):
        h.add(f"GPU-{i}", 79, float(i))
    for code in range(history.MAX_CODES + 5):
        h.add("GPU-last", code, 1000.0 + code)
    assert len(h.gpus) == history.MAX_GPUS and "GPU-0" not in h.gpus
    assert len(h.gpus["GPU-last"]["xids"]) == history.MAX_CODES
    h.gpus["GPU-last"]["xids"]["68"][0] = history.MAX_COUNT
    h.add("GPU-last", 68, 2000.0)
    assert h.codes("GPU-last")[68] == history.MAX_COUNT and h.last("GPU-last") == 68
    path = str(tmp_path / history.NAME)
    history.save(path, h)
    assert len((tmp_path / history.NAME).read_bytes()) < history.MAX_BYTES
    again, why = history.load(path, "b")
    assert why is None and again.gpus == json.loads(h.to_json())["gpus"]


def test_an_xid_kept_by_bus_is_adopted_by_the_gpu_found_there():
    h = history.History("b")
    h.add("pci:00000000:18:00.0", 79, 1.0)
    h.add("GPU-1", 79, 2.0)
    seen = {"index": 0, "bus_id": "00000000:18:00.0", "model": "H100", "serial": "1"}
    assert h.adopt("GPU-1", "00000000:18:00.0", seen)
    assert list(h.gpus) == ["GPU-1"] and h.codes("GPU-1") == {79: 2}
    assert h.gpus["GPU-1"]["xids"]["79"][1] == 1.0 and h.gpus["GPU-1"]["model"] == "H100"
    assert not h.adopt("GPU-1", "00000000:18:00.0", seen)


def test_what_is_not_a_history_is_a_fresh_start_said_in_one_line(tmp_path):
    path = tmp_path / history.NAME
    for text in ("[", "{}", '{"schema": "gpunode.watch-history/v1", "boot_id": "b", "gpus": {"x": 1}}',
                 " " * (history.MAX_BYTES + 1), "[" * 100000):  # fmt: skip
        path.write_text(text)
        h, why = history.load(str(path), "b")
        assert h.gpus == {} and "starting afresh" in why and "\n" not in why
    assert history.load(str(tmp_path / "none"), "b")[1] is None
