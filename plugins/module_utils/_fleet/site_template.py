"""Where a site's own template is found, and whether what it renders is a configuration its program takes.

A site replaces or extends the configuration a role writes by naming its own template in a variable
(`VARIABLES`). A name is looked up in the site's template directories first, then the role's own
templates/; an absolute path is taken as it is. The site's directories (`site_dirs`) are
ds4_site_templates_dir when it is set, else the templates/ beside the playbook that runs, then, for a
playbook in a folder named playbooks/ (this repository's and the collection's: Ansible's playbook_dir is
that folder even when site.yml at the top imports them), the templates/ beside that folder.

A name the search does not find is refused before anything changes, naming the variable and each path
looked in (`problems`, run by ds4_settings_check and by the roles' filter `site_template`).
"""

from __future__ import annotations

import hashlib
import os
import re

# Each variable that names a template a site may bring, and the role whose templates/ holds its own.
VARIABLES = {
    "ds4_gateway_config_template": "ds4_gateway",
    "ds4_monitoring_alerts_template": "ds4_monitoring",
    "ds4_launch_env_template": "ds4_service",
    "ds4_logrotate_template": "ds4_service",
}


class SiteTemplateError(Exception):
    """A template variable that names no file where it is looked for."""


def site_dirs(playbook_dir, configured=""):
    """The site's template directories, in the order they are searched."""
    if configured:
        return [os.path.normpath(configured)]
    playbook_dir = os.path.normpath(playbook_dir)
    dirs = [os.path.join(playbook_dir, "templates")]
    if os.path.basename(playbook_dir) == "playbooks":
        dirs.append(os.path.join(os.path.dirname(playbook_dir), "templates"))
    return dirs


def candidates(name, dirs, role_templates):
    """Every path a template name may be, in the order they are tried."""
    if os.path.isabs(name):
        return [os.path.normpath(name)]
    return [os.path.normpath(os.path.join(directory, name)) for directory in [*dirs, role_templates]]


def resolve(variable, name, dirs, role_templates, isfile=os.path.isfile):
    """The path of the template a variable names; SiteTemplateError naming the variable and each path
    looked in when there is none."""
    if not isinstance(name, str) or not name.strip():
        raise SiteTemplateError(f"{variable} must name a template file, not {name!r}")
    paths = candidates(name, dirs, role_templates)
    for path in paths:
        if isfile(path):
            return path
    raise SiteTemplateError(f"{variable} names {name}, which is none of: {', '.join(paths)}")


def resolve_all(values, playbook_dir, roles_dir, isfile=os.path.isfile):
    """The template each variable present in values names, and the refusals of those that name none."""
    dirs = site_dirs(playbook_dir, values.get("ds4_site_templates_dir") or "")
    found, refused = {}, []
    for variable, role in VARIABLES.items():
        if variable not in values:
            continue
        role_templates = os.path.join(roles_dir, role, "templates")
        try:
            found[variable] = resolve(variable, values[variable], dirs, role_templates, isfile)
        except SiteTemplateError as exc:
            refused.append(str(exc))
    return found, refused


def site_digest(paths, roles_dir):
    """One digest of the site's templates among paths (the roles' own are in the collection's digest),
    with every file beside each, which it may include: a site template changed since the last run
    changes the run's fingerprint."""
    roles_dir = os.path.normpath(roles_dir) + os.sep
    digest = hashlib.sha256()
    for variable, path in sorted(paths.items()):
        if os.path.normpath(path).startswith(roles_dir):
            continue
        digest.update(f"{variable}\0{path}\0".encode())
        directory = os.path.dirname(path)
        for name in sorted(os.listdir(directory)):
            beside = os.path.join(directory, name)
            if os.path.isfile(beside):
                with open(beside, "rb") as handle:
                    digest.update(f"{name}\0".encode() + hashlib.sha256(handle.read()).digest())
    return digest.hexdigest()


# systemd's EnvironmentFile=: an assignment NAME=VALUE, a comment (# or ;), or a blank line; a value in
# quotes may not be left open. systemd skips a line it cannot read with a warning in the journal: the
# engine would then start without the setting, so such a line is refused here.
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _open_quote(value):
    """The quote a value leaves open, or None."""
    quote, escaped = None, False
    for char in value:
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote is None and char in "'\"":
            quote = char
        elif char == quote:
            quote = None
    return quote


def env_file_problems(text):
    """What systemd would not read as written in an environment file: one line per problem, naming the
    line and the variable but never its value (it may be a secret)."""
    problems = []
    lines = text.split("\n")
    number = 0
    while number < len(lines):
        line, first = lines[number], number + 1
        number += 1
        # A backslash at the end of a line continues it.
        while line.endswith("\\") and number < len(lines):
            line = line[:-1] + lines[number]
            number += 1
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            continue
        name, equals, value = stripped.partition("=")
        name = name.strip()
        if not equals:
            problems.append(f"line {first}: not NAME=VALUE")
        elif not _ENV_NAME.fullmatch(name):
            problems.append(f"line {first}: {name!r} is not a variable name")
        elif _open_quote(value.strip()):
            problems.append(f"line {first}: the value of {name} leaves a quote open")
    return problems
