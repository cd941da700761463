"""The request bodies the gateway lets through, as the role's HAProxy template writes them: a vision model's
(its images, up to the engine's 64 MiB) only to the Sparks that serve one, no more than
ds4_gateway_max_body_mb to any other; the molecule gateway scenario has HAProxy check the whole file."""

import re
from pathlib import Path

import jinja2
import yaml

ROLE = Path(__file__).resolve().parents[4] / "roles" / "ds4_gateway"
COMMON = ROLE.parent / "ds4_common"
MIB = 1024 * 1024
HOSTVARS = {"spark01": {"ansible_host": "10.0.0.11"}, "spark02": {"ansible_host": "10.0.0.12"}}


def render(vision_sparks, sparks=("spark01", "spark02"), **over):
    values = {
        **yaml.safe_load((COMMON / "defaults" / "main.yml").read_text()),
        **yaml.safe_load((COMMON / "vars" / "main.yml").read_text()),
        **yaml.safe_load((ROLE / "defaults" / "main.yml").read_text()),
        **yaml.safe_load((ROLE / "vars" / "main.yml").read_text()),
    }
    values.update(
        ansible_managed="managed",
        _ds4_gateway_pem="/etc/haproxy/ds4-gateway.pem",
        _ds4_gateway_metrics_listen="10.0.0.2",
        _ds4_gateway_sparks=list(sparks),
        _ds4_gateway_vision_sparks=list(vision_sparks),
        hostvars=HOSTVARS,
        **over,
    )
    environment = jinja2.Environment(undefined=jinja2.StrictUndefined)
    environment.filters["comment"] = lambda text: f"# {text}"
    template = (ROLE / "templates" / values["ds4_gateway_config_template"]).read_text()
    return environment.from_string(template).render(values)


def section(text, head):
    found = re.search(rf"^{re.escape(head)}\n((?:    .*\n|\n)+?)(?=^\S|\Z)", text + "\n", re.M)
    assert found, f"no {head!r} in:\n{text}"
    return [
        line.strip()
        for line in found.group(1).splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]


def limits(frontend):
    """(status, the rule's condition, backend) of each rule of the frontend that judges a body's size."""
    rules = []
    for line in frontend:
        if "content-length" in line:
            status = re.search(r"status (\d+)", line)
            backend = re.match(r"use_backend (\S+)", line)
            rules.append(
                (
                    int(status.group(1)) if status else None,
                    line.split(" if ", 1)[1],
                    backend and backend.group(1),
                )
            )
    return rules


def test_without_a_vision_model_no_body_beyond_the_text_limit_passes():
    text = render([])
    assert limits(section(text, "frontend ds4")) == [
        (413, f"{{ req.hdr_val(content-length) gt {16 * MIB} }}", None),
        (411, "!{ req.hdr(content-length) -m found } { req.body_len gt 0 }", None),
    ]
    assert "backend ds4_vision" not in text
    # The limit is the operator's.
    assert limits(section(render([], ds4_gateway_max_body_mb=4), "frontend ds4"))[0][1] == (
        f"{{ req.hdr_val(content-length) gt {4 * MIB} }}"
    )


def test_a_body_too_large_is_refused_before_it_is_read_and_one_without_a_length_after():
    """A client that asks before sending (Expect: 100-continue) gets the 413 in place of the go-ahead and
    never sends the body; refused while sending, it would see its connection reset instead of the answer
    (the gateway scenario saw curl report only "100"). The 411 needs the body's first bytes to be read."""
    for vision in ([], ["spark02"]):
        frontend = section(render(vision), "frontend ds4")
        wait = frontend.index("http-request wait-for-body time 30s")
        assert frontend.index(next(line for line in frontend if "status 413" in line)) < wait
        assert frontend.index(next(line for line in frontend if "status 411" in line)) > wait


def test_a_vision_models_body_goes_only_to_the_sparks_that_serve_one():
    text = render(["spark02"])
    frontend = section(text, "frontend ds4")
    assert limits(frontend) == [
        (413, f"{{ req.hdr_val(content-length) gt {64 * MIB} }}", None),
        (None, f"{{ req.hdr_val(content-length) gt {16 * MIB} }}", "ds4_vision"),
        (411, "!{ req.hdr(content-length) -m found } { req.body_len gt 0 }", None),
    ]
    # The vision backend holds the Sparks that serve one alone, each following its server of the Sparks'
    # backend: the health check and an upgrade's drain or maintenance set there.
    assert [line for line in section(text, "backend ds4_vision") if line.startswith("server ")] == [
        "server spark02 10.0.0.12:8000 track ds4_sparks/spark02"
    ]
    assert [line for line in section(text, "backend ds4_sparks") if line.startswith("server ")] == [
        "server spark01 10.0.0.11:8000",
        "server spark02 10.0.0.12:8000",
    ]
