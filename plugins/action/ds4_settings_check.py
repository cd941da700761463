"""Check every public setting of the ds4 roles a play uses, on the controller, before anything changes.

Each role checks its own variables on entry (meta/argument_specs.yml), but only when the play reaches it:
a bad ds4_port would be refused after the engine build and the weights fetch. This action runs the
same argument specs, and the rules of module_utils/_run/settings.py, for the roles it is given, at once:

    - ds4.fleet.ds4_settings_check:
        roles: [ds4_preflight, ds4_engine, ds4_weights, ds4_service, ds4_activate]

The values are the play's (inventory, -e, role defaults); a variable the play has not defined yet (a
role it includes later) takes the role's default. It fails with one line per refused variable, secrets
masked; it needs no connection, changes nothing, and runs in check mode alike.

On a gateway, `gateway_sparks` (the Sparks behind it) adds what only the controller knows: the keys with
those of ds4_gateway_api_keys_file, the certificate's files, that there is a Spark at all, and where the
gateway reaches each (its ds4_gateway_backend_address or ansible_host, a host name or an address only).
"""

from __future__ import annotations

import os

import yaml
from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.ds4.fleet.plugins.module_utils._common.redact import SECRETS
from ansible_collections.ds4.fleet.plugins.module_utils._fleet import site_template
from ansible_collections.ds4.fleet.plugins.module_utils._run import settings as ds4_settings
from ansible_collections.ds4.fleet.plugins.module_utils._run.record import fingerprint

try:  # ansible-core 2.19 templates only strings marked as trusted; before it, every string.
    from ansible.template import trust_as_template
except ImportError:  # pragma: no cover - older ansible-core

    def trust_as_template(value):
        return value


# plugins/action/ -> the collection root, whose roles/ hold the argument specs and defaults.
ROLES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "roles")
# Every ds4 role's variables include the shared ones.
COMMON = "ds4_common"


def _load(role, *parts):
    path = os.path.join(ROLES_DIR, role, *parts)
    try:
        with open(path, encoding="utf-8") as handle:
            return yaml.safe_load(handle), path
    except (OSError, yaml.YAMLError) as exc:
        raise AnsibleActionFail(f"cannot read {path} of role {role}: {exc}") from exc


def role_defaults(role):
    """A role's defaults/main.yml: what a variable is when the play has not loaded the role yet."""
    defaults, _path = _load(role, "defaults", "main.yml")
    return defaults or {}


def role_options(role, entry_point="main"):
    """The options of a role's entry point, read from its meta/argument_specs.yml."""
    loaded, path = _load(role, "meta", "argument_specs.yml")
    specs = (loaded or {}).get("argument_specs") or {}
    if entry_point not in specs:
        raise AnsibleActionFail(f"role {role} has no entry point {entry_point} in {path}")
    return specs[entry_point].get("options") or {}


def _trusted(value):
    """A default read from a role's file, its strings marked as templates as Ansible's loader marks them."""
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, list):
        return [_trusted(item) for item in value]
    if isinstance(value, dict):
        return {key: _trusted(item) for key, item in value.items()}
    return value


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        roles = self._task.args.get("roles")
        if not isinstance(roles, list) or not roles:
            raise AnsibleActionFail("roles must be a list of ds4 role names")
        options, defaults = {}, {}
        for role in [COMMON, *roles]:
            for name, spec in role_options(role).items():
                options.setdefault(name, (role, spec))
            for name, value in role_defaults(role).items():
                defaults.setdefault(name, (role, value))

        values, templars = {}, {}
        for name, (role, spec) in options.items():
            # A role the play includes later (upgrade.yml), or not at all (the firewall play of site.yml),
            # has not put its defaults in the play: they are templated as the role would, role_path its own.
            if name in task_vars:
                values[name] = self._templar.template(task_vars[name])
                continue
            role, value = defaults.get(name, (role, spec.get("default")))
            if role not in templars:
                role_path = os.path.normpath(os.path.join(ROLES_DIR, role))
                # A default may read another role default (ds4_model_generation reads ds4_model_family
                # and the catalog): the play's values first, the roles' defaults under them, as in a role.
                role_defaults_vars = {other: _trusted(default) for other, (_r, default) in defaults.items()}
                templars[role] = self._templar.copy_with_new_env(
                    available_variables={**role_defaults_vars, **task_vars, "role_path": role_path}
                )
            values[name] = templars[role].template(_trusted(value))
        options = {name: spec for name, (_role, spec) in options.items()}
        refused = ds4_settings.check(options, values)
        sparks = self._task.args.get("gateway_sparks")
        if sparks is not None:
            refused += self._gateway_problems(values, sparks, task_vars)
        # A site's own template (ds4_gateway_config_template, ...) must be where its variable says.
        roles_dir = os.path.realpath(ROLES_DIR)
        templates, unfound = site_template.resolve_all(values, task_vars.get("playbook_dir") or "", roles_dir)
        refused += unfound
        # The run's inputs in one digest: a Spark recorded with it, and as recorded, has nothing to do.
        # Secrets left out: the Spark keys them with its own digest key (ds4_applied's `secrets`).
        secret_names = SECRETS | {name for name, spec in options.items() if spec.get("no_log")}
        # The site's templates are inputs too: one changed since the last run makes the run whole.
        inputs = fingerprint(
            dict(values, _ds4_site_templates=site_template.site_digest(templates, roles_dir)),
            os.path.normpath(os.path.join(ROLES_DIR, os.pardir)),
            secret_names,
        )
        result.update(changed=False, checked=sorted(options), fingerprint=inputs)
        if refused:
            result.update(failed=True, refused=refused, msg="; ".join(refused))
        else:
            result["msg"] = f"{len(options)} settings of {', '.join(roles)} accepted"
        return result

    def _gateway_problems(self, values, sparks, task_vars):
        if not isinstance(sparks, list):
            raise AnsibleActionFail("gateway_sparks must be a list of the Sparks behind the gateway")
        keys_file, text, unread = values.get("ds4_gateway_api_keys_file") or "", "", []
        if keys_file:
            try:
                with open(keys_file, encoding="utf-8") as handle:
                    text = handle.read()
            except (OSError, UnicodeDecodeError) as exc:
                unread = [f"ds4_gateway_api_keys_file cannot be read on this controller: {exc}"]
        target = self._templar.template(task_vars.get("ds4_target_hosts", "sparks"))
        values = dict(values, ds4_target_hosts=target)
        addresses = {spark: self._address(spark, task_vars) for spark in sparks}
        return unread + ds4_settings.gateway_problems(values, text, os.path.isfile, sparks, addresses)

    def _address(self, spark, task_vars):
        """Where the gateway's server line reaches a Spark, as the template picks it, and which variable
        says so."""
        hostvars = task_vars.get("hostvars")
        spark_vars = hostvars.raw_get(spark) if hostvars is not None and spark in hostvars else {}
        for name in ("ds4_gateway_backend_address", "ansible_host"):
            if name in spark_vars:
                # Templated as the Spark's own variable: with the Spark's variables, not the gateway's.
                templar = self._templar.copy_with_new_env(available_variables=spark_vars)
                return name, templar.template(spark_vars[name])
        return "inventory name", spark
