"""What ds4_engine installs for the build (vars/main.yml's _ds4_engine_packages): the libibverbs headers on a
tensor pair's members alone, for the engine's RDMA transport."""

from pathlib import Path

import jinja2
import pytest
import yaml

VARS = yaml.safe_load(
    (Path(__file__).resolve().parents[4] / "roles" / "ds4_engine" / "vars" / "main.yml").read_text()
)


def packages(pair):
    environment = jinja2.Environment(undefined=jinja2.StrictUndefined)
    text = environment.from_string(VARS["_ds4_engine_packages"]).render(
        _ds4_pair=pair, _ds4_engine_tensor_packages=VARS["_ds4_engine_tensor_packages"]
    )
    return yaml.safe_load(text)


def test_a_tensor_member_builds_with_the_libibverbs_headers():
    assert packages({"role": "worker", "mode": "tensor"}) == [
        "build-essential", "git", "ca-certificates", "libibverbs-dev",
    ]  # fmt: skip


@pytest.mark.parametrize("pair", [{}, {"role": "worker", "mode": "pipeline"}])
def test_no_other_spark_installs_them(pair):
    assert packages(pair) == ["build-essential", "git", "ca-certificates"]
