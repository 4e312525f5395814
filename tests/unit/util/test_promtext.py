from gpunode.util import promtext


def test_label_values_are_escaped_and_numbers_exact():
    assert promtext.labels(node='a"b', path="c\\d\ne", none=None) == (
        '{node="a\\"b",path="c\\\\d\\ne",none=""}'
    )
    assert [promtext.number(v) for v in (3, 3.0, 2.5, 1e20)] == [
        "3", "3", "2.5", "100000000000000000000"
    ]  # fmt: skip


def test_a_family_is_its_help_type_and_samples():
    lines = promtext.family("x_total", "how many\nof them", [('{a="1"}', 2)], "counter")
    assert lines == [
        "# HELP x_total how many\\nof them",
        "# TYPE x_total counter",
        'x_total{a="1"} 2',
    ]
