"""The model catalog: its shipped data, the generation of a file name, and the files a mode needs."""

import copy
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.ds4.fleet.plugins.filter.ds4_models import FilterModule
from ansible_collections.ds4.fleet.plugins.module_utils._weights.catalog import (
    CatalogError,
    check_family,
    families_of,
    family_generation,
    family_speculation,
    generation_of,
    model_files,
    other_generation_files,
    pair_figures,
    pair_reference_figures,
    serving,
    tensor_reference_figures,
    validate_catalog,
)

DEFAULTS = Path(__file__).resolve().parents[5] / "roles" / "ds4_common" / "defaults" / "main.yml"
BASE_0731 = "DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix-0731.gguf"
DRAFTER_0731 = "DSpark-drafter-Q2K-Q8-0731.gguf"
BASE_LEGACY = "DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix.gguf"
DRAFTER_LEGACY = "DSpark-drafter-Q2K-Q8.gguf"
MTP_LEGACY = "DeepSeek-V4-Flash-MTP-Q4K-Q8_0-F32.gguf"
FILTERS = FilterModule().filters()


@pytest.fixture(scope="module")
def defaults():
    return yaml.safe_load(DEFAULTS.read_text())


@pytest.fixture
def catalog(defaults):
    return copy.deepcopy(defaults["ds4_model_catalog"])


def test_shipped_defaults_hold_the_shared_keys(defaults):
    assert defaults["ds4_gguf_dir"] == "/var/lib/ds4/gguf"
    # The generation follows the family: deepseek-v4-flash serves 0731, as before families.
    assert defaults["ds4_model_family"] == "deepseek-v4-flash"
    assert (
        defaults["ds4_model_generation"]
        == "{{ ds4_model_catalog | ds4.fleet.family_generation(ds4_model_family) }}"
    )
    assert family_generation(defaults["ds4_model_catalog"], defaults["ds4_model_family"]) == "0731"
    # The speculation follows the generation: 0731 speculates with its drafter, as before families.
    assert (
        defaults["ds4_speculation"]
        == "{{ ds4_model_catalog | ds4.fleet.family_speculation(ds4_model_generation) }}"
    )
    assert family_speculation(defaults["ds4_model_catalog"], "0731") == "dspark"
    assert defaults["ds4_hf_endpoint"] == "https://huggingface.co"
    assert defaults["ds4_hf_token"] == ""
    assert defaults["ds4_old_weights"] == "auto"


def test_shipped_catalog_matches_the_contract(catalog):
    assert validate_catalog(catalog) is catalog
    assert set(catalog) == {"0731", "legacy", "vision-exp", "v4.1", "glm-5.3", "qwen3.8"}
    new, old = catalog["0731"]["files"], catalog["legacy"]["files"]
    assert set(new) == {"base", "dspark", "dspark_support"} and set(old) == {"base", "dspark", "mtp"}
    # Upstream's speculation file, in the base's repository; the hub's metadata decides size and hash.
    assert new["dspark_support"] == {
        "name": "DeepSeek-V4-Flash-DSpark-support-0731.gguf",
        "repo": "antirez/deepseek-v4-gguf",
        "revision": "main",
        "size": None,
        "sha256": None,
    }
    assert (new["base"]["name"], new["base"]["size"]) == (BASE_0731, 86_720_111_488)
    assert new["base"]["sha256"] == "ca22ae2f838e14077c22bc1c1417b71b45b5e5a3687bd96c2ac6e17fdb6261c0"
    assert (new["dspark"]["name"], new["dspark"]["size"]) == (DRAFTER_0731, 6_971_241_504)
    assert new["dspark"]["sha256"] == "8fa269560dc76fd73e4233ad9b1938b5f65dd363381fd9b1a5c6183f7d12d686"
    assert [old[r]["name"] for r in ("base", "dspark", "mtp")] == [BASE_LEGACY, DRAFTER_LEGACY, MTP_LEGACY]
    assert all(old[r]["size"] is None and old[r]["sha256"] is None for r in old)
    for files in (new, old):
        assert files["base"]["repo"] == "antirez/deepseek-v4-gguf"
        assert files["dspark"]["repo"] == "bleysg/DeepSeek-V4-Flash-DSpark-drafter-GGUF"
        assert all(f["revision"] == "main" for f in files.values())


@pytest.mark.parametrize(
    "name, expected",
    [
        (BASE_0731, "0731"),
        (DRAFTER_0731, "0731"),
        (f"/home/u/gguf/{BASE_0731}", "0731"),
        (BASE_LEGACY, "legacy"),
        (DRAFTER_LEGACY, "legacy"),
        (MTP_LEGACY, "legacy"),
        ("DeepSeek-V4-Flash-Q4KExperts-chat-v2-imatrix-0731.gguf", "0731"),  # not in the catalog
        ("some-other-model.gguf", None),
    ],
)
def test_generation_of(catalog, name, expected):
    assert generation_of(name, catalog) == expected


def test_generation_without_catalog_knows_only_the_0731_mark():
    assert generation_of(BASE_0731) == "0731"
    assert generation_of(BASE_LEGACY) is None


@pytest.mark.parametrize(
    "generation, speculation, roles, names",
    [
        ("0731", "dspark", ["base", "dspark"], [BASE_0731, DRAFTER_0731]),
        ("0731", "plain", ["base"], [BASE_0731]),
        ("legacy", "dspark", ["base", "dspark"], [BASE_LEGACY, DRAFTER_LEGACY]),
        ("legacy", "mtp", ["base", "mtp"], [BASE_LEGACY, MTP_LEGACY]),
        ("legacy", "plain", ["base"], [BASE_LEGACY]),
    ],
)
def test_model_files(catalog, generation, speculation, roles, names):
    files = model_files(catalog, generation, speculation)
    assert [f["role"] for f in files] == roles
    assert [f["name"] for f in files] == names
    assert all(f["generation"] == generation for f in files)
    assert "role" not in catalog[generation]["files"]["base"], "the catalog itself is left alone"


@pytest.mark.parametrize(
    "generation, expected",
    [
        ("0731", "dspark"),
        ("legacy", "dspark"),
        ("vision-exp", "dspark"),
        ("v4.1", "plain"),
        ("glm-5.3", "mtp"),
        ("qwen3.8", "plain"),
    ],
)
def test_each_family_speculates_its_own_way_by_default(catalog, generation, expected):
    # The drafter where the family has one, else GLM's own MTP block, else none: ds4_speculation's default.
    assert family_speculation(catalog, generation) == expected
    assert FILTERS["family_speculation"](catalog, generation) == expected
    assert model_files(catalog, generation, expected)


def test_the_default_speculation_of_an_unknown_generation_is_left_to_the_settings_check(catalog):
    with pytest.raises(CatalogError, match=r"ds4_model_generation 'glm-5' is not a generation"):
        family_speculation(catalog, "glm-5")
    # As ds4_model_generation's default, the filter gives the old default; the check names the generation.
    assert FILTERS["family_speculation"](catalog, "glm-5") == "dspark"


@pytest.mark.parametrize(
    "generation, speculation, words",
    [
        ("0731", "mtp", ["ds4_speculation 'mtp'", "ds4_model_generation '0731'", "dspark, plain"]),
        ("0731", "eagle", ["ds4_speculation 'eagle'", "dspark, mtp, plain"]),
        ("0732", "dspark", ["ds4_model_generation '0732'", "0731, legacy"]),
        (731, "dspark", ["ds4_model_generation 731"]),
    ],
)
def test_model_files_refuses_impossible_pairs(catalog, generation, speculation, words):
    with pytest.raises(CatalogError) as e:
        model_files(catalog, generation, speculation)
    assert isinstance(e.value, ValueError)
    for word in words:
        assert word in str(e.value)


def test_a_drafter_of_the_other_generation_is_refused(catalog):
    catalog["0731"]["files"]["dspark"] = dict(catalog["legacy"]["files"]["dspark"])
    catalog["legacy"]["files"]["dspark"]["name"] = "DSpark-drafter-legacy-copy.gguf"
    with pytest.raises(CatalogError, match=r"\['0731'\]\.files\.dspark\.name 'DSpark-drafter-Q2K-Q8\.gguf'"):
        model_files(catalog, "0731", "dspark")


def test_the_mtp_head_never_pairs_with_a_0731_base(catalog):
    catalog["0731"]["files"]["mtp"] = dict(catalog["legacy"]["files"]["mtp"], name="DeepSeek-MTP-copy.gguf")
    with pytest.raises(CatalogError, match=r"files never pair across generations"):
        model_files(catalog, "0731", "mtp")


@pytest.mark.parametrize(
    "edit, where",
    [
        (lambda c: c["legacy"]["files"]["mtp"].update(sha256="ABC"), r"\['legacy'\]\.files\.mtp\.sha256"),
        (lambda c: c["legacy"]["files"]["mtp"].update(size=-1), r"\['legacy'\]\.files\.mtp\.size"),
        (lambda c: c["legacy"]["files"]["mtp"].update(size=True), r"\['legacy'\]\.files\.mtp\.size"),
        (lambda c: c["0731"]["files"]["base"].update(repo="no-slash"), r"\['0731'\]\.files\.base\.repo"),
        (lambda c: c["0731"]["files"]["base"].update(revision=""), r"\['0731'\]\.files\.base\.revision"),
        (
            lambda c: c["0731"]["files"]["base"].update(name="../x-0731.gguf"),
            r"\['0731'\]\.files\.base\.name",
        ),
        (lambda c: c["0731"]["files"].pop("base"), r"\['0731'\]\.files has no 'base'"),
        (lambda c: c["0731"]["files"].update(lora={}), r"unknown roles \['lora'\]"),
        (lambda c: c.update({473: c.pop("0731")}), r"generation key 473 .* quote it"),
        (
            lambda c: c["legacy"]["files"]["dspark"].update(name=MTP_LEGACY),
            r"is also ds4_model_catalog\['legacy'\]",
        ),
    ],
)
def test_validation_names_the_bad_entry(catalog, edit, where):
    edit(catalog)
    with pytest.raises(CatalogError, match=where):
        validate_catalog(catalog)


def test_other_generation_files(catalog):
    others = other_generation_files(catalog, "0731")
    assert [f["name"] for f in others if f["generation"] == "legacy"] == [
        BASE_LEGACY,
        DRAFTER_LEGACY,
        MTP_LEGACY,
    ]
    assert {f["generation"] for f in others} == set(catalog) - {"0731"}
    assert {f["generation"] for f in other_generation_files(catalog, "legacy")} == set(catalog) - {"legacy"}


def test_filters_default_to_the_shipped_catalog(catalog):
    assert FILTERS["model_generation"](BASE_LEGACY) == "legacy"
    assert FILTERS["model_generation"](f"/var/lib/ds4/gguf/{DRAFTER_0731}", catalog) == "0731"
    assert [f["name"] for f in FILTERS["model_files"](catalog, "0731", "dspark")] == [BASE_0731, DRAFTER_0731]


def test_filters_fail_naming_the_value(catalog):
    with pytest.raises(
        AnsibleFilterError, match=r"model_generation: cannot tell the generation of 'x\.gguf'"
    ):
        FILTERS["model_generation"]("x.gguf")
    with pytest.raises(AnsibleFilterError, match=r"model_files: ds4_speculation 'mtp' needs a mtp file"):
        FILTERS["model_files"](catalog, "0731", "mtp")


# --- a pair's published figures (issue 42) ---


def test_a_q4_pair_is_held_to_the_published_two_spark_figures_alone(catalog):
    reference = pair_reference_figures(catalog, "0731", "q4")
    assert reference["figures"] == {"prefill_2k": 122, "decode_2k": 11.4}
    assert reference["pair"] and reference["release"] is None and reference["stamp"] == "commit ba00a8a"
    assert "10 GbE" in reference["source"]


def test_a_quantization_without_pair_figures_has_none(catalog):
    assert pair_reference_figures(catalog, "0731", "mxfp4") is None
    assert pair_reference_figures(catalog, "0731", "q2") is None


@pytest.mark.parametrize(
    "pair_reference, says",
    [
        ({"source": "x", "stamp": "y", "figures": {"prefill_64k": 135}}, "unknown figures ['prefill_64k']"),
        ({"source": "x", "stamp": "y", "figures": {"decode_2k": 0}}, "must be a positive tok/s"),
        ({"stamp": "y", "figures": {"decode_2k": 11.4}}, ".pair_reference.source must be a non-empty text"),
        ("fast", "must be a mapping with source, stamp and figures"),
    ],
)
def test_bad_pair_figures_are_refused_naming_them(catalog, pair_reference, says):
    catalog["0731"]["quantizations"]["q4"]["pair_reference"] = pair_reference
    with pytest.raises(CatalogError, match="quantizations\\['q4'\\]") as error:
        validate_catalog(catalog)
    assert says in str(error.value)


# --- a tensor pair's published figures (issue 54) ---


def test_a_tensor_pair_is_held_to_the_published_tensor_figures_of_its_quantization(catalog):
    q2 = tensor_reference_figures(catalog, "0731", "q2")
    assert q2["figures"] == {"decode_2k": 26.0, "dspark_decode": 44.0}
    assert q2["pair"] and q2["release"] is None and q2["note"] == "two Sparks serving q2 in tensor mode"
    assert "RDMA" in q2["source"]
    assert tensor_reference_figures(catalog, "0731", "mxfp4")["figures"] == {"dspark_decode": 41.7}
    # Q4 is the pipeline's alone.
    assert tensor_reference_figures(catalog, "0731", "q4") is None


def test_a_pair_is_held_to_the_figures_of_its_mode(catalog):
    assert pair_figures(catalog, "0731", "q4", "pipeline") == pair_reference_figures(catalog, "0731", "q4")
    assert pair_figures(catalog, "0731", "q2", "tensor") == tensor_reference_figures(catalog, "0731", "q2")
    assert pair_figures(catalog, "0731", "q4", "tensor") is None
    with pytest.raises(CatalogError, match="a pair's mode is pipeline or tensor, got 'tp'"):
        pair_figures(catalog, "0731", "q2", "tp")


@pytest.mark.parametrize(
    "tensor_reference, says",
    [
        ({"Q 5": {"source": "x", "stamp": "y", "figures": {"decode_2k": 26}}},
         "tensor_reference has 'Q 5', not a quantization key like q2"),
        ({"q2": {"source": "x", "stamp": "y", "figures": {"decode_2k": -1}}}, "must be a positive tok/s"),
        ({"q2": "fast"}, "tensor_reference['q2'] must be a mapping with source, stamp and figures"),
        (["q2"], "tensor_reference must be a mapping of quantization to its published figures"),
    ],
)  # fmt: skip
def test_bad_tensor_figures_are_refused_naming_them(catalog, tensor_reference, says):
    catalog["0731"]["tensor_reference"] = tensor_reference
    with pytest.raises(CatalogError, match="ds4_model_catalog\\['0731'\\]") as error:
        validate_catalog(catalog)
    assert says in str(error.value)


def test_every_quantization_of_the_shipped_catalog_plans_its_files_or_names_what_it_lacks(catalog):
    """The sandbox serves a catalog of its own (stand-in bytes): the shipped one's entries are planned here.
    A quantization published by name gives its files, each pinned to a repository and revision, with a size
    and hash or null ones that the hub's metadata decides (a size may be published without its hash, never a
    hash without its size); one not published by name is refused naming the setting that supplies it. Each
    family speculates as it can: a drafter, its own MTP block, or not at all."""
    planned, refused = {}, {}
    for generation, entry in catalog.items():
        speculation = (
            "mtp" if entry.get("builtin_mtp") else "dspark" if "dspark" in entry["files"] else "plain"
        )
        for quantization in [entry.get("base_quantization", "q2"), *entry.get("quantizations", {})]:
            try:
                files = model_files(catalog, generation, speculation, quantization, {})
            except CatalogError as exc:
                refused[(generation, quantization)] = str(exc)
                continue
            for item in files:
                assert item["repo"] and item["revision"] and item["name"].endswith(".gguf"), item
                assert item["sha256"] is None or item["size"] is not None, item
            planned[(generation, quantization)] = [item["role"] for item in files]
    assert planned == {("0731", "q2"): ["base", "dspark"], ("0731", "q4"): ["base", "dspark"],
                       ("legacy", "q2"): ["base", "dspark"],
                       ("vision-exp", "q2"): ["base", "dspark", "vision"],
                       ("v4.1", "q2"): ["base"], ("glm-5.3", "q2"): ["base", "vision"],
                       ("qwen3.8", "q2"): ["base"]}  # fmt: skip
    assert set(refused) == {("0731", "q2-q4"), ("0731", "mxfp4")}
    for (generation, quantization), why in refused.items():
        assert f"ds4_extra_quantizations['{generation}']['{quantization}']" in why, why


# --- model families (issue 53) ---

VISION_BASE = "DeepSeek-V4-Flash-Vision-Exp-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8.gguf"
VISION_ENCODER = "DeepSeek-V4-Flash-Vision-Encoder.gguf"
VISION_DRAFTER = "DSpark-drafter-Q2K-Q8-vision-exp.gguf"
V41_BASE = "DeepSeek-V4.1-Flash-Q2.gguf"
GLM_BASE = "GLM-5.3-Flash-Q2.gguf"
QWEN_BASE = "Qwen3.8-Flash-Next-Q2.gguf"


def test_the_shipped_catalog_has_the_contracts_families(catalog):
    assert families_of(catalog) == {
        "deepseek-v4-flash": ["0731", "legacy"],
        "deepseek-v4-flash-vision": ["vision-exp"],
        "deepseek-v4.1-flash": ["v4.1"],
        "glm-5.3-flash": ["glm-5.3"],
        "qwen3.8-flash-next": ["qwen3.8"],
    }
    vision = catalog["vision-exp"]["files"]
    assert [vision[r]["name"] for r in ("base", "vision", "dspark")] == [
        VISION_BASE,
        VISION_ENCODER,
        VISION_DRAFTER,
    ]
    assert vision["dspark_support"]["name"] == "DeepSeek-V4-Flash-Vision-Exp-DSpark-support.gguf"
    # The one size the contract publishes of the new families: V4.1's, to the byte.
    v41 = catalog["v4.1"]["files"]["base"]
    assert (v41["name"], v41["repo"], v41["size"]) == (
        V41_BASE,
        "antirez/deepseek-v4.1-flash-gguf",
        365_713_686_528,
    )
    assert catalog["glm-5.3"]["files"]["base"]["repo"] == "antirez/glm-5.3-flash-gguf"
    assert catalog["qwen3.8"]["files"]["base"]["name"] == QWEN_BASE
    # Where the hub publishes no size or hash, its metadata at the revision decides, as for legacy.
    for generation in ("vision-exp", "glm-5.3", "qwen3.8"):
        assert all(
            f["sha256"] is None and f["revision"] == "main" for f in catalog[generation]["files"].values()
        )


@pytest.mark.parametrize(
    "generation, expected",
    [
        (
            "0731",
            {
                "family": "deepseek-v4-flash",
                "model_id": "deepseek-v4-flash",
                "context_max": None,
                "streamed": False,
                "power": None,
                "builtin_mtp": False,
                "vision": False,
            },
        ),
        (
            "vision-exp",
            {
                "family": "deepseek-v4-flash-vision",
                "model_id": "deepseek-v4-flash",
                "context_max": None,
                "streamed": False,
                "power": None,
                "builtin_mtp": False,
                "vision": True,
            },
        ),
        (
            "v4.1",
            {
                "family": "deepseek-v4.1-flash",
                "context_default": 32768,
                "context_max": 32768,
                "streamed": True,
                "cache_experts_gb": 64,
                "power": 100,
                "builtin_mtp": False,
                "vision": False,
            },
        ),
        (
            "glm-5.3",
            {
                "family": "glm-5.3-flash",
                "context_default": 16384,
                "context_max": 16384,
                "streamed": False,
                "power": 100,
                "builtin_mtp": True,
                "vision": True,
            },
        ),
        (
            "qwen3.8",
            {
                "family": "qwen3.8-flash-next",
                "streamed": True,
                "cache_experts_gb": 64,
                "resident_bytes": 44_775_113_523,
                "power": None,
            },
        ),
    ],
)
def test_each_generation_says_how_it_is_served(catalog, generation, expected):
    got = serving(catalog, generation)
    assert {key: got[key] for key in expected} == expected


def test_a_catalog_without_families_is_the_v4_flash_family(catalog):
    for spec in catalog.values():
        spec.pop("family", None)
    assert set(families_of(catalog)) == {"deepseek-v4-flash"}
    assert serving(catalog, "legacy")["model_id"] == "deepseek-v4-flash"


@pytest.mark.parametrize(
    "family, expected",
    [("deepseek-v4-flash", "0731"), ("glm-5.3-flash", "glm-5.3"), ("deepseek-v4.1-flash", "v4.1")],
)
def test_a_family_serves_its_first_generation(catalog, family, expected):
    assert family_generation(catalog, family) == expected
    assert FILTERS["family_generation"](catalog, family) == expected


def test_an_unknown_family_is_refused_naming_the_setting(catalog):
    with pytest.raises(CatalogError, match=r"ds4_model_family 'glm-5' is not a family .*glm-5\.3-flash"):
        family_generation(catalog, "glm-5")
    # As ds4_model_generation's default, the filter leaves the refusal to the settings check.
    assert FILTERS["family_generation"](catalog, "glm-5") == ""


def test_a_generation_of_another_family_is_refused_naming_the_replacement(catalog):
    check_family(catalog, "deepseek-v4-flash", "legacy")
    with pytest.raises(CatalogError) as e:
        check_family(catalog, "deepseek-v4-flash", "glm-5.3")
    assert "ds4_model_generation 'glm-5.3' is of ds4_model_family 'glm-5.3-flash'" in str(e.value)
    assert "set ds4_model_family: glm-5.3-flash" in str(e.value)


@pytest.mark.parametrize(
    "generation, speculation, names",
    [
        ("vision-exp", "dspark", [VISION_BASE, VISION_DRAFTER, VISION_ENCODER]),
        ("vision-exp", "plain", [VISION_BASE, VISION_ENCODER]),
        ("glm-5.3", "mtp", [GLM_BASE, "GLM-5.3-Flash-Vision-Encoder.gguf"]),
        ("v4.1", "plain", [V41_BASE]),
        ("qwen3.8", "plain", [QWEN_BASE]),
    ],
)
def test_each_family_fetches_its_files(catalog, generation, speculation, names):
    assert [f["name"] for f in model_files(catalog, generation, speculation)] == names


def test_upstream_speculates_on_vision_exp_with_its_own_support_file(catalog):
    files = model_files(catalog, "vision-exp", "dspark", lineage="upstream")
    assert [f["role"] for f in files] == ["base", "dspark_support", "vision"]


@pytest.mark.parametrize(
    "generation, speculation, words",
    [
        (
            "v4.1",
            "dspark",
            ["ds4_speculation 'dspark'", "'v4.1'", "choose one of: plain", "the family's own (plain)"],
        ),
        (
            "glm-5.3",
            "dspark",
            ["ds4_speculation 'dspark'", "choose one of: mtp, plain", "leave ds4_speculation unset"],
        ),
        ("qwen3.8", "mtp", ["ds4_speculation 'mtp'", "choose one of: plain", "the family's own (plain)"]),
        ("vision-exp", "mtp", ["ds4_speculation 'mtp'", "dspark, plain", "the family's own (dspark)"]),
    ],
)
def test_a_family_refuses_a_speculation_it_has_no_file_for(catalog, generation, speculation, words):
    with pytest.raises(CatalogError) as e:
        model_files(catalog, generation, speculation)
    for word in words:
        assert word in str(e.value)


def test_vision_exp_never_takes_the_0731_drafter(catalog):
    catalog["vision-exp"]["files"]["dspark"] = dict(catalog["0731"]["files"]["dspark"])
    catalog["0731"]["files"]["dspark"]["name"] = "DSpark-drafter-copy-0731.gguf"
    with pytest.raises(
        CatalogError,
        match=r"\['vision-exp'\]\.files\.dspark\.name 'DSpark-drafter-Q2K-Q8-0731\.gguf' belongs to 0731",
    ):
        model_files(catalog, "vision-exp", "dspark")


@pytest.mark.parametrize(
    "edit, where",
    [
        (lambda c: c["glm-5.3"].update(family="GLM 5.3"), r"\['glm-5\.3'\]\.family must be"),
        (lambda c: c["glm-5.3"].update(power=0), r"\['glm-5\.3'\]\.power must be"),
        (lambda c: c["glm-5.3"].update(context={"default": 32768, "max": 16384}), r"\['glm-5\.3'\]\.context"),
        (lambda c: c["v4.1"]["streamed"].pop("cache_experts_gb"), r"\['v4\.1'\]\.streamed\.cache_experts_gb"),
        (
            lambda c: c["qwen3.8"]["streamed"].update(resident_bytes="41.7 GiB"),
            r"\['qwen3\.8'\]\.streamed\.resident",
        ),
        (lambda c: c["glm-5.3"].update(builtin_mtp="yes"), r"\['glm-5\.3'\]\.builtin_mtp must be"),
        (lambda c: c["glm-5.3"].update(model_id=""), r"\['glm-5\.3'\]\.model_id must be"),
        (
            lambda c: c["glm-5.3"]["files"]["base"].update(approx_bytes=-1),
            r"\['glm-5\.3'\]\.files\.base\.approx_bytes",
        ),
    ],
)
def test_family_fields_are_validated_naming_the_entry(catalog, edit, where):
    edit(catalog)
    with pytest.raises(CatalogError, match=where):
        validate_catalog(catalog)


@pytest.mark.parametrize(
    "generation, ctx", [("0731", 524288), ("glm-5.3", 16384), ("v4.1", 32768), ("x", 524288)]
)
def test_the_context_follows_the_family(catalog, generation, ctx):
    assert FILTERS["family_context"](catalog, generation) == ctx


def test_the_serving_filter_names_an_unknown_generation(catalog):
    assert FILTERS["model_serving"](catalog, "glm-5.3")["builtin_mtp"] is True
    with pytest.raises(AnsibleFilterError, match=r"model_serving: ds4_model_generation 'glm'"):
        FILTERS["model_serving"](catalog, "glm")


# --- values the engine does not publish (issue 53) ---

# Every value of the shipped catalog that the engine contract does not publish, by generation: the catalog
# says so in each generation's `guessed`, and docs/models.md names each.
GUESSED = {
    "0731": {"layers"},
    "vision-exp": {"files.base.repo", "files.vision.repo", "files.dspark.repo", "files.dspark_support.repo"},
    "v4.1": {"context.max", "streamed.resident_bytes"},
    "glm-5.3": {"model_id", "files.vision.repo", "context.max"},
    "qwen3.8": {"model_id", "files.base.repo", "streamed.cache_experts_gb"},
}


def test_the_catalog_marks_each_value_the_engine_does_not_publish(catalog):
    marked = {generation: set(spec.get("guessed", {})) for generation, spec in catalog.items()}
    assert {generation: paths for generation, paths in marked.items() if paths} == GUESSED
    for spec in catalog.values():
        assert all(isinstance(why, str) and why for why in spec.get("guessed", {}).values())


def test_the_operators_page_names_each_guessed_value(catalog):
    page = (DEFAULTS.parents[3] / "docs" / "models.md").read_text()
    section = page.split("## Guessed values", 1)[1].split("\n## ", 1)[0]
    for generation, spec in catalog.items():
        for path in spec.get("guessed", {}):
            assert f"`{generation}` `{path}`" in section, (generation, path)


@pytest.mark.parametrize(
    ("guessed", "words"),
    [
        ({"files.base.size": "x", "files.vision.repo": "y"}, "names 'files.vision.repo', which"),
        ({"model_id": ""}, "guessed: the guess of 'model_id' must say why"),
        (["layers"], "guessed must be a mapping"),
    ],
)
def test_a_guess_must_name_a_value_the_generation_has_and_say_why(catalog, guessed, words):
    catalog["0731"]["guessed"] = guessed
    with pytest.raises(CatalogError) as e:
        validate_catalog(catalog)
    assert words in str(e.value) and "ds4_model_catalog['0731']" in str(e.value)
