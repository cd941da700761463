"""`make sanity`'s proof that ansible-test checks the collection as users get it, whole.

Run in the installed collection's root (ansible_collections/ds4/fleet) with the built tarball as argument.
ansible-test finds its targets by walking that directory; this asks ansible-test itself for them and
fails unless they are exactly the tarball's files, the sanity ignore file among them (galaxy.yml ships it,
as Automation Hub's importer runs ansible-test sanity on the tarball as shipped): a collection installed
from elsewhere (a link, an older copy left in place), a file ansible-test skips, or an ignore file that
`make sanity` would have to add fails here.
"""

import sys
import tarfile

from ansible_test._internal.target import walk_sanity_targets


def main(tarball):
    with tarfile.open(tarball) as tar:
        shipped = {member.name for member in tar.getmembers() if member.isfile()}
    targets = {target.path for target in walk_sanity_targets()}
    extra = targets - shipped
    missing = shipped - targets
    ignores = sorted(path for path in shipped if path.startswith("tests/sanity/ignore-"))
    if missing or extra or not ignores:
        for path in sorted(missing):
            print(f"shipped, not a sanity target: {path}")
        for path in sorted(extra):
            print(f"a sanity target the tarball does not ship: {path}")
        if not ignores:
            print(
                "the tarball ships no tests/sanity/ignore-<version>.txt: galaxy.yml's build_ignore drops it"
            )
        return f"ansible-test's {len(targets)} targets are not the tarball's {len(shipped)} files"
    among = ", ".join(ignores)
    print(
        f"ansible-test sanity targets: {len(targets)}: the tarball's {len(shipped)} files, {among} among them"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
