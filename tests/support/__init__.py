"""What the tests share: job and task modules, fakes, processes, networks, a served site."""
