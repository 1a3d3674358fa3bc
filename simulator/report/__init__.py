"""`servesim report DIR`: one self-contained HTML page of a run's or a sweep's results."""
