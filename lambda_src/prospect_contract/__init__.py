"""The Prospect Uploader's pipeline contract: the one place its shared names and shapes live.

Every Prospect function (splitter, classifier, failure recorder, upload sweeper, viewer) and
the stack import these instead of spelling them, and the stack bundles this package beside
each of them. ``docs/contract.md`` describes the contract; the modules hold it:

- ``events``: the event source, every detail type, the detail shapes (TypedDicts) and the
  publish-side deduplication ids;
- ``dead_letters``: the message attributes and body members of the dead-letter queue's
  messages, and the error codes the failure recorder files by shape;
- ``failures``: the kinds of failures-table item;
- ``errors``: ``ConfigurationError``, for a missing or malformed environment variable;
- ``settings``: reading a setting from the environment, failing with that error;
- ``put_events``: PutEvents with retries, for a classic or an EventBridge v2 bus.

Every module uses the standard library only (the bus clients are passed in), so the CDK app
can import the names without boto3.
"""
