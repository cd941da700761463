#!/bin/bash
# What the ds4 roles may touch on a Spark, listed so that two listings compare line by line (issue 28's
# round trip: before site.yml and after remove.yml): the files and directories where the roles write (type,
# mode, owner; a checksum for those under /etc), the run's files in /run, the users and groups, the unit
# files and their states, the units that run, the nftables tables and the installed packages. Run as root
# on the Spark (molecule/<scenario>/prepare.yml before site.yml; the scenario's test after remove.yml).
# Left out, as what the roles do not make: the package manager's own state (the package list stands for
# it), the journal, the backups shadow's tools keep of /etc/passwd, /etc/group (NAME-), and the stamps of
# the host's own timers, which systemd writes whenever one fires.
set -u
echo "## paths"
find /etc /opt /usr/local /srv /var/lib /var/log \
  \( -path /var/lib/dpkg -o -path /var/lib/apt -o -path /var/cache -o -path /var/log/journal \
     -o -path /var/lib/systemd/coredump -o -path /var/lib/systemd/deb-systemd-helper-enabled \
     -o -path /var/lib/systemd/deb-systemd-user-helper-enabled -o -path /var/log/apt -o -path /var/log/dpkg.log \
     -o -path /etc/ld.so.cache -o -path /var/lib/ucf -o -path /var/lib/systemd/timers \) -prune \
  -o \! -name '*-' -printf '%p %y %m %u %g\n' | sort
# Not the stand-in engine's hold directory (/run/ds4-standin, made by the tests that hold a request): no
# real Spark has it.
find /run -maxdepth 1 -name 'ds4*' \! -name ds4-standin -printf '%p %y %m %u %g\n' | sort
find /var/lib/systemd/timers -name '*ds4*' -printf '%p %y %m %u %g\n' | sort
echo "## contents"
find /etc -xdev -type f \! -name '*-' \! -path /etc/ld.so.cache -exec md5sum {} + 2>/dev/null | sort -k2
echo "## users"
getent passwd | sort
echo "## groups"
getent group | sort
echo "## unit files"
systemctl list-unit-files --no-legend --no-pager | awk '{print $1, $2}' | sort
echo "## running"
systemctl list-units --no-legend --no-pager --plain --state=active --type=service,timer,socket | awk '{print $1}' | sort
echo "## nftables"
if command -v nft >/dev/null; then nft list tables | sort; fi
echo "## packages"
dpkg-query --show --showformat='${Package} ${db:Status-Status}\n' | awk '$2 == "installed" {print $1}' | sort
