"""The GPU-hour and memory planner: what a config's runs hold per GPU and cost in GPU-hours, planned from the
models' shapes (and calibrated by measured step times), never measured here. It reads the run registry
(oar.experiment); the registry never imports it."""
