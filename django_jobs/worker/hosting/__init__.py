"""What only ``runjobs`` uses to host workers: the checks before it serves
(:mod:`.startup`), the stop signals (:mod:`.stop_signals`) and the supervisor of
``runjobs --processes`` (:mod:`.supervisor`)."""
