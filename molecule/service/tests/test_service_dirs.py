"""Directories handed to the service user on a sandbox Spark (issue 26, point 2): only below an allowed root,
reached without a link, and never through a parent another user could change.

Each refused run is a nested `ansible-playbook` run of converge.yml whose exit status and messages are
asserted; the Spark keeps serving and /etc keeps its owner whatever the run was given.
"""

import pytest
from nested import flat
from test_service import play as converge

KV = "/var/lib/ds4/kv"


def play(*args):
    """converge.yml again on the Spark, read as an operator reads it: (exit status, all it printed, on one
    line)."""
    run = converge(*args, callback=None)
    return run.rc, flat(run.output + run.stderr)


def owner(host, path):
    return host.check_output(f"stat -c '%U:%G %a' {path}")


def test_the_kv_directory_is_the_service_user_s_below_root_s_parents(host):
    assert owner(host, KV) == "ds4:ds4 750"
    assert owner(host, "/var/lib/ds4") == "root:root 755"


@pytest.mark.parametrize("path", ["/usr/local/lib/ds4", "/var/lib/dpkg", "/root/.ssh", "/var/lib/ds4-fleet"])
def test_a_directory_root_keeps_is_refused_by_name_before_any_change(host, path):
    before = owner(host, path) if host.file(path).exists else None
    rc, output = play("-e", f"ds4_kv_disk_dir={path}")
    assert rc != 0 and "ds4_kv_disk_dir must be a directory of its own below /var/lib/ds4/..." in output, (
        output
    )
    assert (owner(host, path) if host.file(path).exists else None) == before


def test_a_link_or_another_user_s_parent_never_aims_the_chown_elsewhere(host):
    """nobody owns /srv/ds4-other and has put a link to /etc in it; root made a link at /srv/ds4-linked/kv.
    Both are directories named for ds4 directly below /srv, the only place there the settings accept."""
    etc = owner(host, "/etc")
    host.check_output(
        "install -d -o nobody -m 0755 /srv/ds4-other && ln -sfn /etc /srv/ds4-other/kv "
        "&& install -d -m 0755 /srv/ds4-linked && ln -sfn /etc /srv/ds4-linked/kv"
    )
    try:
        rc, output = play("-e", "ds4_kv_disk_dir=/srv/ds4-other/kv")
        assert rc != 0 and "/srv/ds4-other belongs to uid 65534, neither root nor" in output, output
        rc, output = play("-e", "ds4_kv_disk_dir=/srv/ds4-linked/kv")
        linked = "/srv/ds4-linked/kv is a symbolic link: refusing to go through it"
        assert rc != 0 and linked in output, output
        assert owner(host, "/etc") == etc == "root:root 755"
    finally:
        host.check_output("rm -rf /srv/ds4-other /srv/ds4-linked")
    assert host.run("curl -fsS --max-time 5 http://127.0.0.1:8000/v1/models").rc == 0
