"""Developer tools that drive the CDK CLI against the real cloud assembly; not shipped."""
