"""The traffic every routing benchmark replays: seeded synthetic workloads and the media they carry."""
