"""playbooks/verify.yml on the perf scenario's Spark: the stand-in engine paced at the published figures
verifies ok, and a Spark that serves keeps answering; paced at half of them on a GPU that reports thermal
throttling, verify names the throttling first; a release stamped without the GPU's arch is named as the
cause. Each test sets the stand-in's pacing and puts everything back (the `standin` fixture), so the tests
pass alone and in any order, and leave the perf tests the stand-in's own speeds.

The published figures are those of a GB10; the stand-in is paced at them times the sandbox's
ds4_verify_reference_scale (inventory/sandbox/group_vars/all.yml), which verify multiplies them by too, so
that a measurement takes seconds. The pacing is a ceiling (a paced answer is never early): the verdicts rest
on half speed against the sandbox's ds4_verify_min_ratio, not on how fast this machine is.
"""

import json
import threading

import pytest
import yaml
from nested import PROJECT, play
from spark import QUESTION, main_pid, release
from waits import wait_for

SANDBOX = yaml.safe_load((PROJECT / "inventory/sandbox/group_vars/all.yml").read_text())
STANDIN = "/run/ds4-standin"
PACE = f"{STANDIN}/pace.json"
THROTTLE = "/etc/ds4-standin/gpu-throttle"
STAMP = "/opt/ds4/current/.ds4-build.json"
KEPT_STAMP = "/root/verify-test-stamp.json"
HOLD = "verify-serving"
LOAD = f"{STANDIN}/verify-clients"


def pace(host, share):
    """Pace the stand-in engine at SHARE of the published figures (scaled as the sandbox scales them)."""
    published = SANDBOX["ds4_model_catalog"]["0731"]["reference"]["v0.5.0"]["figures"]
    scale = SANDBOX["ds4_verify_reference_scale"] * share
    settings = {
        "prefill_tps": max(published["prefill_2k"], published["prefill_12k"]) * scale,
        "decode_tps": published["decode_2k"] * scale,
        "dspark_decode_tps": published["dspark_decode"] * scale,
        "aggregate_tps": published["aggregate_12"] * scale,
    }
    host.check_output(f"mkdir -p {STANDIN} && echo '{json.dumps(settings)}' > {PACE}")


@pytest.fixture
def standin(host):
    """The stand-ins' knobs and the build stamp, put back whatever the test did."""
    host.check_output(f"cp -a {STAMP} {KEPT_STAMP}")
    yield host
    host.check_output(
        f"cp -a {KEPT_STAMP} {STAMP} && rm -f {KEPT_STAMP} {PACE} {THROTTLE} {STANDIN}/{HOLD} {LOAD}.*"
    )


def verify(tmp_path):
    """verify.yml on the Spark: (the nested run, its JSON report of the Spark)."""
    out = tmp_path / "verify.json"
    run = play(PROJECT / "playbooks/verify.yml", "-l", "spark01", "-e", f"ds4_verify_json={out}")
    assert run.rc == 0, run
    reports = json.loads(out.read_text())["hosts"]
    assert len(reports) == 1, reports
    return run, reports[0]


def shown(run):
    """What the run printed for the Spark: a list of lines."""
    lines = run.result("Show the verification", "spark01").data["msg"]
    assert isinstance(lines, list) and all("\n" not in line for line in lines), lines
    return lines


def test_at_the_published_speed_a_serving_spark_verifies_ok_and_answers_every_request(standin, tmp_path):
    host = standin
    pace(host, 1.0)
    pid, serving = main_pid(host), release(host)
    # A request in flight for the whole run (there is no gateway to take the Spark out of), and more
    # requests while it runs: every one is answered.
    body = json.dumps(
        {"max_tokens": 16, "messages": [{"role": "user", "content": f"[[standin-hold:{HOLD}]] {QUESTION}"}]}
    )
    held = {}
    asker = threading.Thread(
        target=lambda: held.update(
            out=host.run(f"curl -fsS --max-time 600 -d '{body}' http://127.0.0.1:8000/v1/chat/completions")
        )
    )
    asker.start()
    wait_for(
        "the held request in flight",
        lambda: HOLD in json.loads(host.check_output("curl -fsS http://127.0.0.1:8000/standin/holds")),
    )
    # Clients on the Spark ask one question after another until the run has ended, each answer's HTTP
    # status logged; a fifth of a second apart, so that they do not take this small machine from the
    # measurement.
    question = json.dumps({"max_tokens": 16, "messages": [{"role": "user", "content": QUESTION}]})
    host.check_output(f"echo '{question}' > {LOAD}.json && rm -f {LOAD}.log {LOAD}.stop {LOAD}.done")
    host.check_output(
        f'setsid sh -c \'while [ ! -e {LOAD}.stop ]; do curl -s -o /dev/null -w "%{{http_code}}\\n" '
        f"--max-time 120 -d @{LOAD}.json http://127.0.0.1:8000/v1/chat/completions >> {LOAD}.log; "
        f"sleep 0.2; done; touch {LOAD}.done' > /dev/null 2>&1 &"
    )
    try:
        run, report = verify(tmp_path)
    finally:
        host.check_output(f"touch {LOAD}.stop {STANDIN}/{HOLD}")
        wait_for("the clients stopped", lambda: host.file(f"{LOAD}.done").exists, timeout=150)
        asker.join(timeout=120)
    answers = host.file(f"{LOAD}.log").content_string.split()

    assert report["verdict"] == "ok", shown(run)
    assert [row["figure"] for row in report["figures"]] == [
        "prefill_2k",
        "prefill_12k",
        "dspark_decode",
        "aggregate_12",
    ]
    assert all(row["ratio"] >= report["min_ratio"] for row in report["figures"]), report["figures"]
    assert report["reference"]["release"] == "v0.5.0" and report["reference"]["inherited"]
    assert report["state"]["speculation"] == "dspark" and report["state"]["arch"] == "sm_121"
    assert report["state"]["other_requests"] >= 1
    lines = shown(run)
    assert lines[0] == f"spark01: ok, every figure at least {report['min_ratio']:g} of the published one"
    assert any(
        line.startswith(f"  reference: 0731 at v0.5.0 ({report['release']} has no published figures")
        for line in lines
    )
    # Every request answered, the held one too; the Spark serves on, as it did.
    assert answers and set(answers) == {"200"}, answers
    assert held["out"].rc == 0 and "Paris" in held["out"].stdout, held["out"].stderr
    assert (main_pid(host), release(host)) == (pid, serving)
    assert run.changed("spark01") == 0
    # The last verification stays on the Spark, for status.yml and the metrics.
    fact = json.loads(host.file("/etc/ansible/facts.d/ds4_verify.fact").content_string)
    assert fact["verified_at"] == report["verified_at"] and fact["verdict"] == "ok"


def test_at_half_speed_on_a_throttled_gpu_verify_names_the_throttling_first(standin, tmp_path):
    host = standin
    pace(host, 0.5)
    host.check_output(f"echo sw_thermal_slowdown > {THROTTLE}")
    run, report = verify(tmp_path)
    assert report["verdict"] == "slow" and report["lowest_ratio"] < report["min_ratio"], report["figures"]
    assert report["causes"][0]["cause"] == "gpu-throttled", report["causes"]
    lines = shown(run)
    assert lines[0].startswith("spark01: SLOW, ")
    cause = next(line for line in lines if line.startswith("  cause 1: "))
    assert "sw_thermal_slowdown active" in cause and "96 C" in cause, lines


def test_a_release_stamped_without_the_gpus_arch_is_named_as_the_cause(standin, tmp_path):
    host = standin
    pace(host, 0.5)
    stamp = json.loads(host.file(STAMP).content_string)
    stamp["sass_archs"] = {program: ["sm_75"] for program in stamp["sass_archs"]}
    host.check_output(f"echo '{json.dumps(stamp)}' > {STAMP}")
    run, report = verify(tmp_path)
    assert report["verdict"] == "slow", report["figures"]
    assert report["causes"][0]["cause"] == "build-without-native-arch", report["causes"]
    assert "no native code for the GPU's sm_121 (its build stamp lists sm_75)" in report["causes"][0]["text"]
    assert any("cause 1: the running release's build carries no native code" in line for line in shown(run))


def test_a_spark_built_without_the_spark_target_is_named_among_the_causes(standin, tmp_path):
    host = standin
    pace(host, 0.5)
    stamp = json.loads(host.file(STAMP).content_string)
    stamp["build_target"] = {"arch": "sm_121", "make_target": "cuda", "make_args": ["CUDA_ARCH=sm_121"]}
    stamp["make_target_reason"] = (
        "built without the Spark target, because its Makefile has no cuda-spark target"
    )
    host.check_output(f"echo '{json.dumps(stamp)}' > {STAMP}")
    run, report = verify(tmp_path)
    assert report["verdict"] == "slow", report["figures"]
    assert "build-without-spark-target" in [cause["cause"] for cause in report["causes"]], report["causes"]
    assert any(
        "the running release was built without the Spark target (make cuda CUDA_ARCH=sm_121)" in line
        for line in shown(run)
    ), shown(run)
