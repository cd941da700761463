"""What ds4.service.j2 allows a tensor pair over RDMA (its verbs and connection-manager devices under the
closed device policy, unlimited locked memory) and allows no other launch, and the description `systemctl
status ds4` shows: rendered from launch_config."""

import re
from pathlib import Path

import jinja2
import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._service.launch import launch_config

UNIT = Path(__file__).resolve().parents[4] / "roles" / "ds4_service" / "templates" / "ds4.service.j2"
BASE = "/var/lib/ds4/models/DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix-0731.gguf"
SUPPORT = "/var/lib/ds4/models/DeepSeek-V4-Flash-DSpark-support-0731.gguf"
SINGLE = {
    "release_dir": "/opt/ds4/current",
    "base_model": BASE,
    "dspark_model": SUPPORT,
    "lineage": "upstream",
}
PIPELINE = dict(SINGLE, dist_role="worker", dist_layers="21:output", dist_host="10.77.0.1", dist_port=9400)
TENSOR = dict(SINGLE, dist_role="worker", dist_mode="tensor", dist_host="10.77.0.1", dist_port=9400)
RDMA = dict(
    TENSOR,
    dist_transport="rdma",
    dist_address="10.77.0.2",
    rdma_launcher="/usr/local/lib/ds4/ds4-rdma-launch",
)
TCP = dict(TENSOR, dist_transport="tcp")


V4_FLASH = {"ds4_model_family": "deepseek-v4-flash", "ds4_model_generation": "0731", "ds4_quantization": "q2"}


def render(settings, device_allow=("char-nvidia* rwm",), memlock="infinity", model=None):
    launch = launch_config(settings)
    mode = settings.get("dist_mode", "pipeline")
    pair = {"pair": "pair01", "peer": "spark04", "layers": settings.get("dist_layers"), "mode": mode,
            "coordinator_address": "10.77.0.1", "port": 9400,
            "transport": settings.get("dist_transport")}  # fmt: skip
    environment = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    environment.filters["comment"] = lambda text: f"# {text}"
    environment.filters["basename"] = lambda path: path.rsplit("/", 1)[-1]
    return environment.from_string(UNIT.read_text()).render(
        ansible_managed="managed",
        _ds4_pair_role=settings.get("dist_role", ""),
        _ds4_pair=pair if "dist_role" in settings else {},
        _ds4_build={"release": "g0123456789ab", "commit": "0123456789ab"},
        _ds4_spark_note="",
        _ds4_model_names={"base": settings["base_model"].rsplit("/", 1)[-1]},
        ds4_speculation=settings.get("speculation", "dspark"),
        **(model or V4_FLASH),
        _ds4_supervision_dropin="/etc/systemd/system/ds4.service.d/00-ds4-fleet-supervision.conf",
        _ds4_user="ds4",
        _ds4_group="ds4",
        _ds4_device_groups=["video", "render"],
        _ds4_env_file="/etc/ds4/ds4.env",
        __ds4_launch=launch,
        _ds4_lib_dir="/usr/local/lib/ds4",
        _ds4_ready_url="http://127.0.0.1:8000/v1/models",
        ds4_limit_memlock=memlock,
        _ds4_lock_file="/run/ds4/ds4.lock",
        _ds4_protect_home="read-only",
        ds4_device_allow=list(device_allow),
    )


def service(text, key):
    section = text.split("[Service]", 1)[1].split("[Install]", 1)[0]
    return [m.group(1) for m in re.finditer(rf"^{key}=(.*)$", section, re.MULTILINE)]


def test_a_tensor_pair_over_rdma_gets_its_devices_and_unlimited_locked_memory():
    text = render(RDMA, memlock="8G")
    assert service(text, "DevicePolicy") == ["closed"]
    assert service(text, "DeviceAllow") == [
        "char-nvidia* rwm", "char-infiniband_verbs rw", "/dev/infiniband/rdma_cm rw",
    ]  # fmt: skip
    assert service(text, "LimitMEMLOCK") == ["infinity"]
    assert service(text, "ExecStart")[0].startswith("/usr/bin/python3 -B /usr/local/lib/ds4/ds4-rdma-launch ")
    assert service(text, "RestrictAddressFamilies") == ["AF_UNIX AF_INET AF_INET6 AF_NETLINK"]


@pytest.mark.parametrize("settings", [SINGLE, PIPELINE, TCP], ids=["single", "pipeline", "tensor-tcp"])
def test_no_other_launch_gets_them(settings):
    text = render(settings, memlock="8G")
    assert service(text, "DeviceAllow") == ["char-nvidia* rwm"]
    assert service(text, "LimitMEMLOCK") == ["8G"]
    assert "infiniband" not in text and "ds4-rdma-launch" not in text
    assert service(text, "RestrictAddressFamilies") == ["AF_UNIX AF_INET AF_INET6 AF_NETLINK"]


def test_a_unit_without_a_device_policy_is_not_closed_for_rdma():
    text = render(RDMA, device_allow=())
    assert service(text, "DevicePolicy") == [] and service(text, "DeviceAllow") == []


def test_a_host_that_cannot_lift_its_locked_memory_gives_rdma_its_own_limit():
    # The sandbox's containers cannot raise RLIMIT_MEMLOCK (ds4_rdma_limit_memlock 8M there).
    text = render(dict(RDMA, rdma_limit_memlock="8M"), memlock="8G")
    assert service(text, "LimitMEMLOCK") == ["8M"]
    assert service(text, "DeviceAllow")[1:] == ["char-infiniband_verbs rw", "/dev/infiniband/rdma_cm rw"]


def test_the_description_names_the_family_generation_and_quantization_served():
    glm = {"ds4_model_family": "glm-5.3-flash", "ds4_model_generation": "glm-5.3", "ds4_quantization": "q2"}
    settings = dict(SINGLE, base_model="/var/lib/ds4/models/GLM-5.3-Flash-Q2.gguf", speculation="mtp")
    settings.update(builtin_mtp=True, dspark_model=None, model_generation="glm-5.3")
    (description,) = re.findall(r"^Description=(.*)$", render(settings, model=glm), re.MULTILINE)
    assert description.endswith(
        "serving glm-5.3-flash glm-5.3 q2 (GLM-5.3-Flash-Q2.gguf) with mtp speculation"
    ), description
