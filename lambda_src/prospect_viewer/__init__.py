"""Prospect Viewer: browse, filter, export and retry recorded failures.

Handler string: ``prospect_viewer.handler.handler`` (Lambda Function URL, payload 2.0).
``prospect_viewer.local_server.serve`` runs the same handler behind http.server.
"""
