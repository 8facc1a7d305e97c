"""Floor 5, the study loop: the checked run plan, the driver that runs a study's trials,
re-measurement of contenders, profiling, replay of a recorded run, several workers."""
