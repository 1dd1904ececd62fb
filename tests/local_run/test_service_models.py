"""One botocore data loader for the sessions of a local run (``service_models``)."""

from __future__ import annotations

import boto3
import botocore.session

from constructs_lib.local_engine.service_models import shared_loader, shared_service_models


def _loader(session: boto3.session.Session) -> object:
    return session._session.get_component("data_loader")


def test_sessions_made_while_open_share_one_loader_and_its_search_paths_once():
    with shared_service_models():
        first, second = boto3.session.Session(), boto3.session.Session()
        assert _loader(first) is _loader(second) is shared_loader()
        paths = shared_loader().search_paths
        # boto3 appends its data directory for each session: the shared loader keeps it once
        assert len(paths) == len(set(paths))
        # AND a client of each session works as before
        assert first.client("sqs", region_name="us-east-1").meta.service_model.service_name == (
            "sqs"
        )


def test_sessions_made_after_close_get_a_loader_of_their_own():
    with shared_service_models():
        pass
    assert botocore.session.create_loader is not shared_loader
    assert _loader(boto3.session.Session()) is not shared_loader()


def test_a_data_path_gets_a_loader_of_its_own():
    assert shared_loader("/nowhere") is shared_loader("/nowhere") is not shared_loader()
    assert shared_loader("/nowhere").search_paths[0] == "/nowhere"
