"""The option of the modules that reach the network through the site's proxy (ds4_proxy_env)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  proxy_env:
    description:
      - The site's proxy (C(ds4_proxy_env)), C(http_proxy), C(https_proxy), C(no_proxy) or C(all_proxy)
        (lower or upper case) to their values, set in the module's own environment before it reaches the
        network, so that its HTTP requests and git commands go through the proxy.
      - Given here rather than as the task's C(environment), which Ansible puts on the remote shell's
        command line, where C(ps) and C(-vvv) show a proxy's C(user:password). Never logged; a password in
        a proxy URL is masked in everything the module returns.
    type: dict
    default: {}
    version_added: 0.1.0
"""
