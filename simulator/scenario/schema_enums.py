"""The names the JSON Schema of scenario files lists (``servesim schema``), read from the
registries so that a new preset, model, GPU or cost-model kind appears there by itself.

pydantic sees ``model``, ``hardware``, ``cost_model`` and each scheduler as free strings or
mappings; these fragments replace them. Each accepts every value the run accepts: a model may
also be a config.json path, a hardware or model name is matched case-insensitively (so a name
with capitals, ``_`` or spaces is left to the run), and a scheduler may be an out-of-tree
``package.module:Class``. Only what the run would refuse outright is refused here.
"""
from __future__ import annotations

# Strings the loaders normalise (capitals, "_", spaces): the schema cannot know where they lead.
NOT_NORMALISED = r"[A-Z_ ]"
CLASS_PATH = r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$"


def model_schema() -> dict:
    from cost_models.model_spec import PRESETS
    return {"title": "Model", "type": "string", "description": "a model preset (servesim models), "
            "or the path of a HuggingFace config.json or model folder",
            "anyOf": [{"enum": sorted(PRESETS)}, {"type": "string"}]}


def hardware_schema(inline: dict) -> dict:
    from cost_models.hardware import hardware_aliases
    return {"title": "Hardware", "default": "h100-sxm",
            "description": "a GPU preset or alias (servesim hardware), or an inline spec",
            "anyOf": [{"enum": sorted(hardware_aliases())},
                      {"type": "string", "pattern": NOT_NORMALISED}, inline]}


def cost_model_schemas() -> tuple[dict, dict]:
    """The field's schema and one definition per kind, with the options that kind accepts
    (cost_models/factory.py), tagged by ``kind`` as pydantic tags the arrival kinds."""
    from cost_models.factory import COST_MODEL_BUILDERS
    from cost_models.profiles import physics_profile_names, profile_names
    choices = {"profile": {"enum": profile_names()}, "path": {"type": "string"}}
    defs = {}
    for kind, entry in COST_MODEL_BUILDERS.items():
        kind_choices = {**choices, "profile": {"enum": physics_profile_names()}} if kind == "physics" else choices
        options = {name: kind_choices.get(name, {"type": ["number", "null"]}) for name in entry.options}
        defs[f"CostModel_{kind}"] = {"type": "object", "required": ["kind"],
                                     "additionalProperties": False,
                                     "properties": {"kind": {"const": kind}, **options}}
    field = {"title": "Cost Model", "type": "object", "default": {"kind": "roofline"},
             "description": f"kind: {', '.join(COST_MODEL_BUILDERS)}",
             "oneOf": [{"$ref": f"#/$defs/{name}"} for name in defs],
             "discriminator": {"propertyName": "kind", "mapping": {
                 kind: f"#/$defs/CostModel_{kind}" for kind in COST_MODEL_BUILDERS}}}
    return field, defs


def schedulers_schema() -> dict:
    from simulator.policies.registry import preset_names
    preset = {"anyOf": [{"enum": preset_names()}, {"type": "string", "pattern": CLASS_PATH}]}
    item = {"type": "object", "additionalProperties": True,
            "properties": {"preset": preset, "kind": preset},
            "anyOf": [{"required": ["preset"]}, {"required": ["kind"]}]}
    return {"title": "Schedulers", "type": "array", "minItems": 1, "items": item}


def with_enumerations(schema: dict) -> dict:
    """``schema`` (pydantic's, of Scenario) with the catalogs' names in it."""
    properties = schema["properties"]
    inline = next(s for s in properties["hardware"]["anyOf"] if s.get("type") == "object")
    cost_model, cost_model_defs = cost_model_schemas()
    schema.setdefault("$defs", {}).update(cost_model_defs)
    properties.update(model=model_schema(), hardware=hardware_schema(inline), cost_model=cost_model,
                      schedulers=schedulers_schema())
    return schema
