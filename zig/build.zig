//! Developer build of the zrecord native core.
//!
//! `zig build` installs a static library (zig-out/lib/libzrecord.a) exporting the zr_* C ABI
//! of include/zrecord.h; whoever links it also links the platform's libzstd.so.1. `zig build
//! test` runs every test block of src/ (the same tests as `zig test src/root.zig
//! src/sigbus_guard.c -lc /usr/lib/x86_64-linux-gnu/libzstd.so.1`). The Python package does not
//! use this file: its build hook compiles src/root.zig together with the core's C files and the
//! Cython-generated C in one `zig build-lib` command that names libzstd.so.1 by path in the
//! same way.

const std = @import("std");

/// The core's C files, compiled into the library and the tests beside src/root.zig: the SIGBUS
/// guard needs sigsetjmp, which Zig cannot call (see the file's comment).
const c_sources = [_][]const u8{"src/sigbus_guard.c"};

/// Where common Linux distributions put libzstd.so.1: the one list, shared with the Python
/// packages' build (packages/build_support.py). `{arch}` stands for the target's CPU; the
/// other folders hold the building machine's own libraries and are searched only when the
/// target's CPU is the machine's.
const libzstd_dirs = @embedFile("libzstd-dirs.txt");

/// The folders of libzstd_dirs that apply to `target`, in order.
fn libzstdDirs(b: *std.Build, target: std.Build.ResolvedTarget) []const []const u8 {
    const arch = @tagName(target.result.cpu.arch);
    const native = target.result.cpu.arch == b.graph.host.result.cpu.arch;
    var dirs: std.ArrayList([]const u8) = .empty;
    var lines = std.mem.tokenizeScalar(u8, libzstd_dirs, '\n');
    while (lines.next()) |raw| {
        const line = std.mem.trim(u8, raw, " \t\r");
        if (line.len == 0 or line[0] == '#') continue;
        if (std.mem.indexOf(u8, line, "{arch}") != null) {
            const for_arch = std.mem.replaceOwned(u8, b.allocator, line, "{arch}", arch) catch @panic("OOM");
            dirs.append(b.allocator, for_arch) catch @panic("OOM");
        } else if (native) {
            dirs.append(b.allocator, line) catch @panic("OOM");
        }
    }
    return dirs.items;
}

fn findLibzstd(b: *std.Build, dirs: []const []const u8) ?[]const u8 {
    for (dirs) |dir| {
        const path = b.pathJoin(&.{ dir, "libzstd.so.1" });
        std.Io.Dir.accessAbsolute(b.graph.io, path, .{}) catch continue;
        return path;
    }
    return null;
}

pub fn build(b: *std.Build) void {
    const target = b.standardTargetOptions(.{});
    const optimize = b.standardOptimizeOption(.{});

    const module = b.createModule(.{
        .root_source_file = b.path("src/root.zig"),
        .target = target,
        .optimize = optimize,
        .link_libc = true,
    });

    for (c_sources) |file| module.addCSourceFile(.{ .file = b.path(file) });
    // A static library is not linked, so libzstd is left to whatever links it.
    const lib = b.addLibrary(.{
        .name = "zrecord",
        .linkage = .static,
        .root_module = module,
    });
    lib.installHeader(b.path("include/zrecord.h"), "zrecord.h");
    b.installArtifact(lib);

    const test_module = b.createModule(.{
        .root_source_file = b.path("src/root.zig"),
        .target = target,
        .optimize = optimize,
        .link_libc = true,
    });
    for (c_sources) |file| test_module.addCSourceFile(.{ .file = b.path(file) });
    const test_step = b.step("test", "Run the native core's tests");
    const dirs = libzstdDirs(b, target);
    if (findLibzstd(b, dirs)) |libzstd| {
        test_module.addObjectFile(.{ .cwd_relative = libzstd });
        const tests = b.addTest(.{ .root_module = test_module });
        test_step.dependOn(&b.addRunArtifact(tests).step);
    } else {
        const fail = b.addFail(b.fmt("zrecord needs the platform's zstd library: libzstd.so.1 " ++
            "was not found in {s}. Install the package libzstd1 (Debian, Ubuntu) or libzstd " ++
            "(Fedora, RHEL, Arch, Alpine: zstd-libs).", .{std.mem.join(b.allocator, ", ", dirs) catch @panic("OOM")}));
        test_step.dependOn(&fail.step);
    }
}
