"""Services on their own intervals: the rescuer and the scheduler."""
