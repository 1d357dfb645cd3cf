"""The names of a Wan 2.2 model's transformer experts, one home for every layer that names them
(the loader's layouts, the step plan, the caches, sidecars): A14B models have a high-noise
expert (the early, noisy steps) and a low-noise expert; TI2V-5B has one."""

HIGH, LOW, SINGLE = "high_noise", "low_noise", "single"
TWO_EXPERTS = (HIGH, LOW)
