"""Floor 3, the study store: where a study lives, the queue that lets several drivers share it,
and the trials table every output reads."""
