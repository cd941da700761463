"""What `make docs` appends to the conf.py that `antsibull-docs sphinx-init` writes: the site builds
offline, with every warning an error (build.sh's `-W`).

The docsites of Ansible, Python and Jinja are out of reach here, so intersphinx reads no inventory. The
pages antsibull-docs writes refer to a few labels of Ansible's docsite; each is resolved below to its page
there. A label of Ansible's that is not listed stays an undefined label, and fails the build: add it here.
"""

from docutils import nodes

intersphinx_mapping: dict = {}

ANSIBLE_DOCSITE = "https://docs.ansible.com/projects/ansible/devel/"
ANSIBLE_LABELS = {
    "action_plugins": "plugins/action.html",
    "ansible_collections.ansible.builtin.copy_module": "collections/ansible/builtin/copy_module.html",
    "ansible_configuration_settings": "reference_appendices/config.html",
    "common_return_values": "reference_appendices/common_return_values.html",
}


def _ansible_docsite(app, env, node, contnode):
    """A reference to a label of Ansible's docsite, as a link to its page there."""
    target = node.get("reftarget")
    if node.get("reftype") != "ref" or target not in ANSIBLE_LABELS:
        return None
    link = nodes.reference("", "", internal=False, refuri=ANSIBLE_DOCSITE + ANSIBLE_LABELS[target])
    link += contnode
    return link


def setup(app):
    app.connect("missing-reference", _ansible_docsite)
