"""Floor 1, inside training: a memory strategy and how it is applied, the model contract, the
device, memory measurement, and what a user imports to train with a tuned configuration. Runs in a
trial process and in a user's own training loop alike, so what is measured is what is used."""
