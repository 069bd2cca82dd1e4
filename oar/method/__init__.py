"""The paper's algorithm, free of training and IO machinery: token scorers and probes, the gate, metrics."""
