from pathlib import Path

from testproject.example.management.commands.demo import python_command


def test_demo_hint_runs_the_virtualenv_python_relative_to_the_project():
    project = Path("/srv/shop")
    assert python_command("/srv/shop/.venv/bin/python", project) == ".venv/bin/python"


def test_demo_hint_gives_a_python_outside_the_project_in_full_and_quoted():
    assert python_command("/usr/bin/python3", Path("/srv/shop")) == "/usr/bin/python3"
    assert python_command("/opt/my env/bin/python", Path("/srv")) == "'/opt/my env/bin/python'"
