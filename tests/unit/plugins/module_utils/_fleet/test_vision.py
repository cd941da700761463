"""Which of the gateway's Sparks serve a vision model (module_utils/_fleet/vision.py, filter vision_sparks):
they alone take a request body as large as images need."""

import copy
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.ds4.fleet.plugins.filter.ds4_gateway import FilterModule
from ansible_collections.ds4.fleet.plugins.module_utils._fleet.vision import vision_sparks

DEFAULTS = Path(__file__).resolve().parents[5] / "roles" / "ds4_common" / "defaults" / "main.yml"
CATALOG = yaml.safe_load(DEFAULTS.read_text())["ds4_model_catalog"]
FAMILY = "deepseek-v4-flash"


def test_the_sparks_of_a_family_with_a_vision_encoder_serve_images():
    hostvars = {
        "spark01": {},
        "spark02": {"ds4_model_family": "deepseek-v4-flash-vision"},
        "spark03": {"ds4_model_family": "glm-5.3-flash"},
        # V4.1's vision file is left out of the catalog: the engine has no CUDA vision for it.
        "spark04": {"ds4_model_family": "deepseek-v4.1-flash"},
        "spark05": {"ds4_model_family": "deepseek-v4-flash", "ds4_model_generation": "legacy"},
    }
    sparks = list(hostvars)
    assert vision_sparks(sparks, hostvars, CATALOG, FAMILY) == ["spark02", "spark03"]
    assert FilterModule().filters()["vision_sparks"](sparks, hostvars, CATALOG, FAMILY) == [
        "spark02",
        "spark03",
    ]
    # The gateway's own family where a Spark sets none (its group_vars of all).
    assert vision_sparks(["spark01"], hostvars, CATALOG, "glm-5.3-flash") == ["spark01"]


def test_a_spark_with_its_own_catalog_is_judged_by_it():
    catalog = copy.deepcopy(CATALOG)
    del catalog["glm-5.3"]["files"]["vision"]
    del catalog["glm-5.3"]["guessed"]["files.vision.repo"]
    hostvars = {"spark03": {"ds4_model_family": "glm-5.3-flash", "ds4_model_catalog": catalog}}
    assert vision_sparks(["spark03"], hostvars, CATALOG, FAMILY) == []


def test_a_family_the_catalog_lacks_is_refused_naming_the_spark():
    hostvars = {"spark01": {"ds4_model_family": "glm-5"}}
    with pytest.raises(
        AnsibleFilterError, match=r"vision_sparks: spark01: ds4_model_family 'glm-5' is not a family"
    ):
        FilterModule().filters()["vision_sparks"](["spark01"], hostvars, CATALOG, FAMILY)
