"""Scenario files: reading (file.py: YAML, --set overrides), validating (model.py: the frozen
Scenario dataclass, pydantic's errors as one line each) and the error they raise (errors.py)."""
from simulator.scenario.errors import ScenarioError
from simulator.scenario.model import Scenario, json_schema, load_scenario, validate_scenario

__all__ = ["Scenario", "ScenarioError", "json_schema", "load_scenario", "validate_scenario"]
