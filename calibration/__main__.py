"""``python -m calibration ...`` runs the ``calibrate`` command."""
from calibration.cli import calibrate

if __name__ == "__main__":
    calibrate(prog_name="python -m calibration")
