//! Developer build of the zrecord native core.
//!
//! `zig build` installs a static library (zig-out/lib/libzrecord.a) exporting the zr_* C ABI
//! of include/zrecord.h; `zig build test` runs every test block of src/ (the same tests as
//! `zig test src/root.zig -lc`). The Python package does not use this file: its build hook
//! compiles src/root.zig together with the Cython-generated C in one `zig build-lib` command.

const std = @import("std");

pub fn build(b: *std.Build) void {
    const target = b.standardTargetOptions(.{});
    const optimize = b.standardOptimizeOption(.{});

    const module = b.createModule(.{
        .root_source_file = b.path("src/root.zig"),
        .target = target,
        .optimize = optimize,
        .link_libc = true,
    });

    const lib = b.addLibrary(.{
        .name = "zrecord",
        .linkage = .static,
        .root_module = module,
    });
    lib.installHeader(b.path("include/zrecord.h"), "zrecord.h");
    b.installArtifact(lib);

    const tests = b.addTest(.{ .root_module = module });
    const run_tests = b.addRunArtifact(tests);
    const test_step = b.step("test", "Run the native core's tests");
    test_step.dependOn(&run_tests.step);
}
