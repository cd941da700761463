"""`make sanity`'s proof that ansible-test checks the collection as users get it, whole.

Run in the installed collection's root (ansible_collections/ds4/fleet) with the built tarball as argument.
ansible-test finds its targets by walking that directory; this asks ansible-test itself for them and
fails unless they are exactly the tarball's files and the sanity ignore files beside them: a collection
installed from elsewhere (a link, an older copy left in place) or a file ansible-test skips fails here.
"""

import sys
import tarfile

from ansible_test._internal.target import walk_sanity_targets


def main(tarball):
    with tarfile.open(tarball) as tar:
        shipped = {member.name for member in tar.getmembers() if member.isfile()}
    targets = {target.path for target in walk_sanity_targets()}
    extra = {path for path in targets - shipped if not path.startswith("tests/sanity/ignore-")}
    missing = shipped - targets
    if missing or extra or not shipped:
        for path in sorted(missing):
            print(f"shipped, not a sanity target: {path}")
        for path in sorted(extra):
            print(f"a sanity target the tarball does not ship: {path}")
        return f"ansible-test's {len(targets)} targets are not the tarball's {len(shipped)} files"
    print(
        f"ansible-test sanity targets: {len(targets)}: the tarball's {len(shipped)} files, the ignore files"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
