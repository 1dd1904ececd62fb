"""Prospect splitter: turns one uploaded CSV into one EventBridge event per valid row.

Handler string: ``prospect_splitter.handler.handler``.
"""
