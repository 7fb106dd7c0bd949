"""GET /api/tools (contract §3): the five tools as LLM function definitions, from the validating models."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from loops.schemas import AfterSchedule, CronSchedule, EverySchedule, LoopCreateIn, LoopDeleteIn, LoopListIn
from sessions_app.schemas import CheckSessionStatusIn, ListSessionsIn
from tests.conftest import ApiClient, error_of

MODELS: dict[str, type[BaseModel]] = {
    "loop_create": LoopCreateIn,
    "loop_list": LoopListIn,
    "loop_delete": LoopDeleteIn,
    "list_sessions": ListSessionsIn,
    "check_session_status": CheckSessionStatusIn,
}
SCHEDULE_MODELS = {"EverySchedule": EverySchedule, "AfterSchedule": AfterSchedule, "CronSchedule": CronSchedule}
DEPRECATED = {("loop_create", "time_in_seconds"), ("loop_delete", "id")}


@pytest.fixture
def catalogue(api) -> dict[str, dict]:
    response = api.get("/api/tools")
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == {"tools"}
    return {tool["name"]: tool for tool in body["tools"]}


def object_schemas(schema, path="$"):
    """Every object schema at any depth (properties, items, anyOf/oneOf branches and $defs)."""
    if isinstance(schema, dict):
        if schema.get("type") == "object" or "properties" in schema:
            yield path, schema
        for key, value in schema.items():
            yield from object_schemas(value, f"{path}.{key}")
    elif isinstance(schema, list):
        for index, value in enumerate(schema):
            yield from object_schemas(value, f"{path}[{index}]")


def test_catalogue_lists_exactly_the_five_tools(api):
    tools = api.get("/api/tools").json()["tools"]
    assert [tool["name"] for tool in tools] == list(MODELS)


def test_each_tool_has_a_name_description_and_input_schema_only(catalogue):
    for name, tool in catalogue.items():
        assert set(tool) == {"name", "description", "input_schema"}, name
        assert len(tool["description"]) > 20, name
        assert tool["input_schema"]["type"] == "object", name


@pytest.mark.parametrize("name", MODELS)
def test_input_schema_is_generated_from_the_validating_model(catalogue, name):
    assert catalogue[name]["input_schema"] == MODELS[name].model_json_schema()


@pytest.mark.parametrize("name", MODELS)
def test_schema_properties_match_the_model_fields(catalogue, name):
    schema = catalogue[name]["input_schema"]
    model = MODELS[name]
    assert list(schema["properties"]) == list(model.model_fields)
    required = {field for field, info in model.model_fields.items() if info.is_required()}
    assert set(schema.get("required", [])) == required


def test_required_fields_are_the_documented_ones(catalogue):
    assert catalogue["loop_create"]["input_schema"]["required"] == ["prompt"]
    assert catalogue["check_session_status"]["input_schema"]["required"] == ["session_id"]
    for name in ("loop_list", "loop_delete", "list_sessions"):
        assert "required" not in catalogue[name]["input_schema"], name


@pytest.mark.parametrize("name", MODELS)
def test_every_object_at_every_depth_forbids_additional_properties(catalogue, name):
    objects = list(object_schemas(catalogue[name]["input_schema"]))
    assert objects
    for path, schema in objects:
        assert schema.get("additionalProperties") is False, (name, path)


def test_schedule_variants_are_strict_objects_with_their_own_fields(catalogue):
    schema = catalogue["loop_create"]["input_schema"]
    definitions = schema["$defs"]
    assert set(SCHEDULE_MODELS) <= set(definitions)
    for definition_name, model in SCHEDULE_MODELS.items():
        variant = definitions[definition_name]
        assert variant["additionalProperties"] is False, definition_name
        assert list(variant["properties"]) == list(model.model_fields), definition_name
        assert "kind" in variant["required"], definition_name
    assert definitions["EverySchedule"]["properties"]["kind"]["const"] == "every"
    assert definitions["AfterSchedule"]["properties"]["kind"]["const"] == "after"
    assert definitions["CronSchedule"]["properties"]["kind"]["const"] == "cron"
    schedule = schema["properties"]["schedule"]
    refs = {branch["$ref"] for option in schedule["anyOf"] for branch in option.get("oneOf", [])}
    assert refs == {f"#/$defs/{name}" for name in SCHEDULE_MODELS}


@pytest.mark.parametrize("variant,field", [("EverySchedule", "every_seconds"), ("AfterSchedule", "after_seconds")])
def test_durations_are_integers_from_1_to_2_pow_53_minus_1(catalogue, variant, field):
    prop = catalogue["loop_create"]["input_schema"]["$defs"][variant]["properties"][field]
    assert (prop["type"], prop["minimum"], prop["maximum"]) == ("integer", 1, 2**53 - 1)
    alias = catalogue["loop_create"]["input_schema"]["properties"]["time_in_seconds"]["anyOf"][0]
    assert (alias["type"], alias["minimum"], alias["maximum"]) == ("integer", 1, 2**53 - 1)


def test_prompt_schema_states_its_limit(catalogue):
    prompt = catalogue["loop_create"]["input_schema"]["properties"]["prompt"]
    assert (prompt["type"], prompt["maxLength"]) == ("string", 100_000)


def test_list_sessions_limit_schema_states_its_bounds(catalogue):
    limit = catalogue["list_sessions"]["input_schema"]["properties"]["limit"]
    assert (limit["type"], limit["minimum"], limit["maximum"], limit["default"]) == ("integer", 1, 500, 50)


def test_deprecated_aliases_are_marked_deprecated_and_nothing_else_is(catalogue):
    marked = set()
    for name, tool in catalogue.items():
        for _path, schema in object_schemas(tool["input_schema"]):
            for field, prop in schema.get("properties", {}).items():
                if prop.get("deprecated"):
                    marked.add((name, field))
    assert marked == DEPRECATED


def test_no_model_or_effort_field_is_offered(catalogue):
    for _name, tool in catalogue.items():
        for _path, schema in object_schemas(tool["input_schema"]):
            assert not {"model", "model_effort", "effort", "reasoning_effort"} & set(schema.get("properties", {}))


def test_catalogue_needs_a_tools_token(db, host_api):
    response = ApiClient(None).get("/api/tools")
    assert response.status_code == 401
    assert error_of(response)["code"] == "unauthorized"
    assert host_api.get("/api/tools").status_code == 403


def test_openapi_document_is_served_with_every_operation(tools_token):
    response = ApiClient(tools_token).get("/api/openapi.json")
    assert response.status_code == 200
    paths = response.json()["paths"]
    assert set(paths) == {
        "/api/tools",
        *(f"/api/tools/{name}" for name in MODELS),
        "/api/loops",
        "/api/runs",
        "/api/loops/{loop_id}/runs",
        "/api/loops/{loop_id}/upcoming",
        "/api/loops/{loop_id}",
        "/api/loops/{loop_id}/pause",
        "/api/loops/{loop_id}/resume",
        "/api/loops/{loop_id}/run",
        "/api/loops/{loop_id}/retry",
        "/api/loops/{loop_id}/events",
        "/api/host/sessions/{session_id}",
        "/api/host/sessions/{session_id}/inbox",
        "/api/host/presets/{name}",
        "/api/host/runs/{run_id}/outcome",
        "/api/dsh/deliveries/{key}",
        "/api/health",
    }
    assert set(paths["/api/host/sessions/{session_id}"]) == {"get", "put"}
    assert set(paths["/api/loops"]) == {"get", "post"}
    assert set(paths["/api/loops/{loop_id}"]) == {"get", "patch", "delete"}


def test_openapi_tool_bodies_are_the_same_models(tools_token):
    document = ApiClient(tools_token).get("/api/openapi.json").json()
    schemas = document["components"]["schemas"]
    for name, model in MODELS.items():
        assert schemas[model.__name__]["properties"].keys() == model.model_json_schema()["properties"].keys(), name


def test_api_docs_page_answers(tools_token):
    response = ApiClient(tools_token).get("/api/docs")
    assert response.status_code == 200
    assert b"openapi.json" in response.content
