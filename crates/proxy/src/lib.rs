//! sluice's data plane (being built).
