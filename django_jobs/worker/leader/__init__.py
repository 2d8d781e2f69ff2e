"""The leader and its chores: the leader lease as this process sees it
(:mod:`.leadership`), the chores (:mod:`.maintainer`) and when the main thread runs
them (:mod:`.chores`)."""
