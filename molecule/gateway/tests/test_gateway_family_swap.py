"""A model family swap on a Spark behind the gateway, through site.yml (issue 53): spark02 from V4 Flash 0731
to Vision-Exp under ds4_old_weights: remove. Vision-Exp's files are fetched beside 0731's; the old family's
files go only after the new one passed its smoke test, and the engine's KV disk cache is cleared at the swap
(engine contract: it survives a model swap otherwise, cross-quant=accept).

1. The smoke test fails (ds4_smoke_expect asks for an answer the engine does not give): the run fails,
   spark02 serves 0731 again, its 0731 files are all there and verified, and the KV cache holds nothing of
   Vision-Exp; its record says 0731.
2. It passes: spark02 serves Vision-Exp, 0731's files were removed after the smoke test, the cache cleared.
Both on the release spark02 runs. spark02 is left serving Vision-Exp (ends_scenario, after the upgrade):
putting it back would cost a third site.yml run.

This is the gateway scenario's because its Sparks are provisioned by site.yml and serve (ds4.service, the
smoke test, the KV cache): the weights scenario runs the weights role alone.
"""

import json
import os
from pathlib import Path

import pytest
import yaml
from nested import play
from spark import main_pid, release

ROOT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
INVENTORY = Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent
SITE = ROOT / "site.yml"
GGUF = "/var/lib/ds4/gguf"
KV = "/var/lib/ds4/kv"
KV_RECORD = "/var/lib/ds4-fleet/kv-family.json"
# The files of each family as the sandbox catalog pins them (inventory/sandbox/group_vars/all.yml).
CATALOG = yaml.safe_load((ROOT / "inventory" / "sandbox" / "group_vars" / "all.yml").read_text())[
    "ds4_model_catalog"
]
OLD = {CATALOG["0731"]["files"][role]["name"]: CATALOG["0731"]["files"][role] for role in ("base", "dspark")}
NEW = {
    CATALOG["vision-exp"]["files"][role]["name"]: CATALOG["vision-exp"]["files"][role]
    for role in ("base", "vision", "dspark")
}
VISION_BASE = CATALOG["vision-exp"]["files"]["base"]["name"]
ENCODER = CATALOG["vision-exp"]["files"]["vision"]["name"]
OLD_BASE = CATALOG["0731"]["files"]["base"]["name"]
SWAP = ("-l", "spark02", "-e", "ds4_model_family=deepseek-v4-flash-vision", "-e", "ds4_old_weights=remove")
SMOKE = "Ask the engine the smoke question"
REMOVAL = "Remove the other generation's files that the plan names"


def site(*args):
    return play(SITE, *args, inventory=INVENTORY)


def argv(host):
    return host.file(f"/proc/{main_pid(host)}/cmdline").content_string.split("\0")


def ggufs(host):
    return {name for name in host.run(f"ls -A {GGUF}").stdout.split() if name.endswith(".gguf")}


def verified(host, files):
    """Each file whole: the catalog's sha256, and the fetch's record of it."""
    for name, entry in files.items():
        assert host.check_output(f"sha256sum {GGUF}/{name}").split()[0] == entry["sha256"], name
        assert (
            json.loads(host.file(f"{GGUF}/.{name}.verified.json").content_string)["sha256"] == entry["sha256"]
        )


def kv_bank(host, name):
    """A KV bank on disk, as the engine leaves them (owned by ds4)."""
    host.check_output(f"runuser -u ds4 -- sh -c 'echo bank > {KV}/{name}'")


def kv_family(host):
    return json.loads(host.file(KV_RECORD).content_string)["family"]


def kv_files_naming(host, text):
    """The KV cache's files that name TEXT (the stand-in engine's record of its banks names its model)."""
    return host.run(f"grep -rl -- {text} {KV}").stdout.split()


def answers_paris(host):
    body = json.dumps({"model": "deepseek-v4-flash", "max_tokens": 64, "messages": [
        {"role": "user", "content": "What is the capital of France? Answer in one sentence."}]})  # fmt: skip
    answer = host.check_output(
        "curl -fsS -H 'Content-Type: application/json' -d %s http://127.0.0.1:8000/v1/chat/completions", body
    )
    return "Paris" in json.loads(answer)["choices"][0]["message"]["content"]


@pytest.mark.ends_scenario
def test_a_family_swap_removes_the_old_familys_files_only_after_its_smoke_test(hosts):
    spark02 = hosts["spark02"]
    # The release it runs: converge's, or the upgrade's where that test ran first.
    swap = (*SWAP, "-e", f"ds4_release={release(spark02)}")
    assert ggufs(spark02) >= set(OLD) and f"{GGUF}/{OLD_BASE}" in argv(spark02)
    # 1. The smoke test fails: rolled back to 0731, whose files all stay.
    kv_bank(spark02, "bank-0731.kv")
    failed = site(*swap, "-e", "ds4_smoke_expect=Lyon")
    assert failed.rc != 0 and failed.failed("spark02") >= 1, failed
    smoke = [result for result in failed.of("spark02", SMOKE) if not result.skipped]
    assert smoke[0].failed and "Lyon" in smoke[0].msg, smoke
    assert not failed.of("spark02", REMOVAL), "nothing is removed after a failed smoke test"
    assert f"{GGUF}/{OLD_BASE}" in argv(spark02) and "--vision" not in argv(spark02)
    assert answers_paris(spark02)
    # The new family's files were fetched beside the old, and the old ones are whole.
    assert ggufs(spark02) == set(OLD) | set(NEW)
    verified(spark02, OLD)
    # The swap cleared 0731's banks; the rollback cleared what Vision-Exp wrote before 0731 started.
    assert not spark02.file(f"{KV}/bank-0731.kv").exists
    assert kv_files_naming(spark02, VISION_BASE) == []
    assert kv_family(spark02) == "deepseek-v4-flash"

    # 2. It passes: Vision-Exp serves, and 0731's files went after its smoke test, not before.
    kv_bank(spark02, "bank-0731.kv")
    passed = site(*swap)
    assert passed.rc == 0, passed
    assert argv(spark02)[argv(spark02).index("--vision") + 1] == f"{GGUF}/{ENCODER}"
    assert f"{GGUF}/{VISION_BASE}" in argv(spark02)
    assert answers_paris(spark02)
    order = [result.name for result in passed.of("spark02") if not result.skipped]
    assert SMOKE in order and REMOVAL in order and order.index(SMOKE) < order.index(REMOVAL), order
    assert ggufs(spark02) == set(NEW)
    assert not any(spark02.file(f"{GGUF}/.{name}.verified.json").exists for name in OLD)
    verified(spark02, NEW)
    assert not spark02.file(f"{KV}/bank-0731.kv").exists
    assert kv_family(spark02) == "deepseek-v4-flash-vision"
