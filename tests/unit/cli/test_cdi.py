"""`gpunode cdi generate`."""

from __future__ import annotations

import json

from gpunode.cli import main as cli


def test_cdi_generate_install_uses_the_first_spec_dir(fake_node, tmp_path, capsys):
    with open(fake_node, "a") as fh:
        fh.write(f'cdi-spec-dirs = ["{tmp_path}/etc-cdi", "{tmp_path}/run-cdi"]\n')
    args = ["cdi", "generate", "--config", str(fake_node), "--install", "--json"]
    assert cli.main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["path"] == f"{tmp_path}/etc-cdi/nvidia.yaml" and out["changed"] is True
    assert cli.main(args) == 0
    assert json.loads(capsys.readouterr().out)["changed"] is False
    assert cli.main([*args, "--output", "/x.yaml"]) == 2
