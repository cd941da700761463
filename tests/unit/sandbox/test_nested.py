"""molecule/shared/nested.py and ordering.py, which every scenario's tests use: a nested playbook's jsonl
events read back as results by host and task, and a scenario's tests run last to first with the ones that
end it still last. The playbook runs on this machine (connection local), as a scenario's would on a Spark."""

import os
import subprocess
import sys
import textwrap

import nested
from nested import play
from waits import wait_for

PLAYBOOK = """
- name: The first play
  hosts: all
  gather_facts: false
  tasks:
    - name: Say what is to change
      ansible.builtin.debug:
        msg: "Nothing to change: the Spark is as\\nthe last run left it"
    - name: Change something
      ansible.builtin.debug:
        msg: changed
      changed_when: true
      notify: Restart it
  handlers:
    - name: Restart it
      ansible.builtin.debug:
        msg: restarted
- name: The second play
  hosts: all
  gather_facts: false
  tasks:
    - name: Fail saying why
      ansible.builtin.fail:
        msg: 'Activation of v1 failed at "Ask". Rolled back'
"""


def test_a_run_is_read_back_by_host_task_and_play(tmp_path):
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAYBOOK)
    printed = []
    run = play(playbook, "-c", "local", "-v", inventory="localhost,", on_line=printed.append)
    assert run.rc == 2, run
    assert (run.changed("localhost"), run.failed("localhost"), run.count("localhost", "ok")) == (1, 1, 3)
    assert run.plays == ["The first play", "The second play"]
    assert run.plays_of("localhost") == run.plays
    assert "Restart it" in run.tasks
    assert run.result("Change something", "localhost").changed
    failure = run.result("Fail saying why")
    assert failure.failed and failure.play == "The second play" and run.failures() == [failure]
    # Messages as the operator reads them, a wrapped one included; per host or from the whole run.
    assert run.said("Nothing to change: the Spark is as the last run left it", "localhost")
    assert run.said('Activation of v1 failed at "Ask"') and not run.said("Activation of v2")
    # A pattern, line by line as the run said them.
    assert run.search(r"Spark is (\w+)$")[1] == "as" and run.search(r"Spark is as the") is None
    # The lines that are not events stay, in order: -v names the configuration file.
    assert any("config file" in line for line in run.lines)
    # A failed assertion shows the exit status and each failure with its message, not the JSON events.
    shown = repr(run)
    assert shown.startswith("nested run: rc=2\n"), shown
    assert "localhost failed 'Fail saying why': Activation of v1 failed at \"Ask\"" in shown, shown
    assert '"_event"' not in shown, shown
    assert len(printed) == len(run.output.splitlines())


def test_the_default_callback_gives_the_text_alone(tmp_path):
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAYBOOK)
    run = play(playbook, "-c", "local", inventory="localhost,", callback=None)
    assert run.rc == 2 and run.events == [] and "TASK [Say what is to change]" in run.output


# A module that warns, as the preflight does when ds4_force lets a host through.
WARNING_MODULE = """
from ansible.module_utils.basic import AnsibleModule

module = AnsibleModule(argument_spec={})
module.warn("GPU is a test GPU; going on because ds4_force is true")
module.exit_json(changed=False)
"""
WARNING_PLAYBOOK = """
- name: A play of no host
  hosts: nohost
  gather_facts: false
  tasks: []
- name: A play that warns
  hosts: all
  gather_facts: false
  tasks:
    - name: Warn
      warn: {}
"""


def test_the_warnings_are_read_from_the_results_and_from_ansible(tmp_path):
    (tmp_path / "library").mkdir()
    (tmp_path / "library" / "warn.py").write_text(WARNING_MODULE)
    playbook = tmp_path / "play.yml"
    playbook.write_text(WARNING_PLAYBOOK)
    python = f"ansible_python_interpreter={sys.executable}"
    run = play(playbook, "-c", "local", "-e", python, inventory="localhost,")
    assert run.rc == 0, run
    module = "GPU is a test GPU; going on because ds4_force is true"
    assert run.warnings("localhost") == [module]
    # Ansible's own, outside any result, only among the whole run's.
    assert run.warnings() == [module, "Could not match supplied host pattern, ignoring: nohost"]


HELD = """
- name: A run held until the test lets it go
  hosts: all
  gather_facts: false
  tasks:
    - name: Say it waits
      ansible.builtin.debug:
        msg: waiting
    - name: Wait for the go-ahead
      ansible.builtin.wait_for:
        path: "{{ go }}"
        timeout: 600
    - name: Say it went on
      ansible.builtin.debug:
        msg: went on
"""


def held(tmp_path, during):
    playbook = tmp_path / "held.yml"
    playbook.write_text(HELD)
    go = tmp_path / "go"
    # The module runs with this Python: the machine's own may have no Ansible beside it.
    args = ("-c", "local", "-e", f"go={go}", "-e", f"ansible_python_interpreter={sys.executable}")
    return go, play(playbook, *args, inventory="localhost,", during=during)


def test_during_acts_at_a_point_of_the_run_and_the_run_goes_on(tmp_path):
    seen = []

    def let_go(live):
        live.wait_for("the wait started", lambda: live.started("Wait for the go-ahead"))
        seen.append(live.running)
        go.touch()

    go = tmp_path / "go"
    _, run = held(tmp_path, let_go)
    assert run.rc == 0 and not run.killed and seen == [True], run
    assert run.said("went on")


def test_during_kills_the_run_with_its_processes(tmp_path):
    def kill(live):
        live.wait_for("the wait started", lambda: live.started("Wait for the go-ahead"))
        live.kill()

    _, run = held(tmp_path, kill)
    assert run.killed and run.rc == -9, run
    assert "Say it waits" in run.tasks and not run.said("went on") and run.stats == {}
    # No worker of the run is left waiting for the file, once the kill has reached them all.
    left = ["pgrep", "-f", str(tmp_path / "go")]
    wait_for("no process of the run left", lambda: subprocess.run(left).returncode == 1, timeout=30)


def test_what_during_raises_fails_the_test_and_ends_the_run(tmp_path):
    def never(live):
        live.wait_for("a line that never comes", lambda: live.printed("never"), timeout=1)

    try:
        held(tmp_path, never)
    except AssertionError as error:
        assert "a line that never comes: not within 1 s" in str(error)
    else:
        raise AssertionError("the failure of `during` was lost")


def test_during_fails_at_once_when_the_run_ends_before_the_point(tmp_path):
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAYBOOK)

    def too_late(live):
        live.wait_for("a task that never starts", lambda: live.started("No such task"))

    try:
        play(playbook, "-c", "local", inventory="localhost,", during=too_late)
    except AssertionError as error:
        assert "the run ended before a task that never starts" in str(error)
    else:
        raise AssertionError("the run's end was not noticed")


def test_reverse_runs_the_tests_last_to_first_and_the_end_of_the_scenario_last(tmp_path):
    (tmp_path / "conftest.py").write_text(
        "from ordering import pytest_addoption, pytest_collection_modifyitems, pytest_configure  # noqa\n"
    )
    (tmp_path / "test_order.py").write_text(
        textwrap.dedent(
            """
            import pytest

            def test_a(): pass

            @pytest.mark.ends_scenario
            def test_b(): pass

            def test_c(): pass

            @pytest.mark.ends_scenario
            def test_d(): pass
            """
        )
    )
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]
    command += ["--collect-only", str(tmp_path)]
    listed = {}
    for reverse in (False, True):
        done = subprocess.run(
            command + (["--reverse"] if reverse else []),
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=dict(os.environ, PYTHONPATH=os.path.dirname(nested.__file__)),
        )
        assert done.returncode == 0, done.stdout + done.stderr
        listed[reverse] = [line.split("::")[-1] for line in done.stdout.splitlines() if "::" in line]
    # The ends keep their written order: the later one runs on what the earlier left.
    assert listed == {
        False: ["test_a", "test_c", "test_b", "test_d"],
        True: ["test_c", "test_a", "test_b", "test_d"],
    }
