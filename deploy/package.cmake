# package.cmake - the Debian packages of ringd, made by CPack:
#
#   cpack -G DEB            (in the build directory)
#
# gives, for Debian 12 (bookworm) on this architecture:
#   ringd_V_ARCH.deb          ringd, ringctl, the systemd unit, its sysusers.d
#                             and tmpfiles.d snippets, man pages (ringd(8),
#                             ringctl(1), ringd.yaml(5)), the example
#                             configuration; its maintainer scripts create the
#                             user and directories and never start or enable
#                             the service; removing it stops the service
#   libringd0_V_ARCH.deb      the client library
#   libringd-dev_V_ARCH.deb   ringd.h, libringd.so, ringd.pc
#   python3-ringd_V_all.deb   the ringd module, where Debian's python3 finds it
#   python3-ringd-torch_V_ARCH.deb
#                             the C++ half of ringd's torch.distributed backend,
#                             built for Debian's python3-torch, where this
#                             machine can build it (libtorch-dev, pybind11-dev,
#                             python3-dev; client/python/torch_ext)
#
# A package installs under /usr with Debian's layout (the multiarch library
# directory, /usr/lib/python3/dist-packages, no RPATH) and is compiled with
# Debian's hardening flags (dpkg-buildflags), while a build tree is usually
# configured for /usr/local, tests and maybe a sanitizer. So cpack, unless
# run in a tree configured for packages (RINGD_DEB_TREE), configures a second
# tree, deb-tree/ inside this one, and packages that: it builds its
# `preinstall` target (everything) and installs each component from there.
# Needs dpkg-dev (dpkg-shlibdeps, dpkg-buildflags) and file.

option(RINGD_DEB_TREE "This tree is configured for the Debian packages (set by cpack)" OFF)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME ringd)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${RINGD_DEB_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

set(CPACK_COMPONENTS_ALL)
foreach(pair IN LISTS RINGD_DEB_PACKAGES)
    string(REPLACE ":" ";" pair ${pair})
    list(GET pair 0 component)
    list(GET pair 1 package)
    list(APPEND CPACK_COMPONENTS_ALL ${component})
    string(TOUPPER ${component} C)
    set(CPACK_DEBIAN_${C}_PACKAGE_NAME ${package})
    set(_extra)
    foreach(f postinst prerm postrm triggers)
        if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/debian/${package}/${f})
            list(APPEND _extra ${CMAKE_CURRENT_LIST_DIR}/debian/${package}/${f})
        endif()
    endforeach()
    set(CPACK_DEBIAN_${C}_PACKAGE_CONTROL_EXTRA "${_extra}")
endforeach()
set(_v "${PROJECT_VERSION}")

# ringctl links libringd, which dpkg-shlibdeps cannot place while neither
# package is built: the library package is named here, at this very version.
# The unit and the maintainer scripts need systemd (systemd-sysusers,
# systemd-tmpfiles); ExecReload uses sh's kill, not procps'.
set(CPACK_DEBIAN_DAEMON_PACKAGE_SECTION net)
set(CPACK_DEBIAN_DAEMON_PACKAGE_DEPENDS "libringd0 (= ${_v}), systemd")
set(CPACK_DEBIAN_DAEMON_DESCRIPTION "ring allreduce daemon for data-parallel training
ringd sums or averages buffers across the hosts of a cluster of ordinary
Linux machines, as data-parallel training needs for every gradient: the
daemons of the hosts form a TCP ring and run a bandwidth-optimal ring
allreduce, broadcast, allgather, reduce-scatter and barrier. Training
processes submit their buffers to their host's daemon through libringd, in
shared memory.

This package holds the daemon, its systemd unit (not enabled: write
/etc/ringd/ringd.yaml, then systemctl enable --now ringd) and ringctl, which
shows the ring's state and checks and times collectives.")

set(CPACK_DEBIAN_LIBRARY_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON) # for libringd0, the one package with a library
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
set(CPACK_DEBIAN_LIBRARY_DESCRIPTION "client library of ringd, the ring allreduce daemon
libringd lets a training process join the collectives (allreduce,
broadcast, allgather, reduce-scatter, barrier) of its host's ringd daemon
over a Unix socket, with buffers in shared memory.")

set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "libringd0 (= ${_v})")
set(CPACK_DEBIAN_DEV_DESCRIPTION "client library of ringd, the ring allreduce daemon (development files)
libringd lets a training process join the collectives of its host's ringd
daemon. This package holds the header ringd.h, which documents every call,
and the files to link with it (pkg-config --cflags --libs ringd).")

# numpy is imported by `import ringd` itself (ringd/_core.py), so it is a
# dependency, not a recommendation; torch is for ringd.torch only.
set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
set(CPACK_DEBIAN_PYTHON_PACKAGE_ARCHITECTURE all)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SHLIBDEPS OFF)
set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS "python3:any, python3-numpy, libringd0 (>= ${_v})")
set(CPACK_DEBIAN_PYTHON_PACKAGE_RECOMMENDS "ringd")
set(CPACK_DEBIAN_PYTHON_PACKAGE_SUGGESTS "python3-torch")
set(CPACK_DEBIAN_PYTHON_DESCRIPTION "Python module of ringd, the ring allreduce daemon
The ringd module joins the collectives of this host's ringd daemon from
Python, with numpy arrays in shared memory, and ringd.torch gives
Horovod-style data parallelism to PyTorch models. It is ctypes over
libringd: nothing to compile.")

# The extension is built for one torch and one Python (their C++ and C
# ABIs: libtorch's sonames carry major.minor), so it depends on exactly
# those; dpkg-shlibdeps adds libtorch1.13 and the C++ runtime.
# Of a version "X.Y...": "X.Y" into out, and "X.(Y+1)" into out_next.
function(ringd_minor version out out_next)
    string(REGEX MATCH "^([0-9]+)\\.([0-9]+)" minor "${version}")
    math(EXPR next "${CMAKE_MATCH_2} + 1")
    set(${out} "${minor}" PARENT_SCOPE)
    set(${out_next} "${CMAKE_MATCH_1}.${next}" PARENT_SCOPE)
endfunction()
if("torch:python3-ringd-torch" IN_LIST RINGD_DEB_PACKAGES)
    get_property(_torch GLOBAL PROPERTY RINGD_TORCH_VERSION)
    get_property(_py GLOBAL PROPERTY RINGD_TORCH_PYTHON)
    ringd_minor("${_torch}" _t _t_next)
    ringd_minor("${_py}" _p _p_next)
    set(CPACK_DEBIAN_PYTHON_PACKAGE_SUGGESTS "python3-ringd-torch")
    set(CPACK_DEBIAN_TORCH_PACKAGE_SECTION python)
    set(CPACK_DEBIAN_TORCH_PACKAGE_DEPENDS
        "python3-ringd (= ${_v}), python3-torch (>= ${_t}), python3-torch (<< ${_t_next}~), python3 (>= ${_p}~), python3 (<< ${_p_next})")
    set(CPACK_DEBIAN_TORCH_DESCRIPTION "torch.distributed backend of ringd, the ring allreduce daemon
With this package, PyTorch runs the collectives of torch.distributed and
DistributedDataParallel over this host's ringd daemon: init_process_group
with the backend ringd. It holds the C++ half of the backend, built for
torch ${_t} and Python ${_p}; the Python half is in python3-ringd.")
endif()

if(RINGD_DEB_TREE)
    set(_tree "${CMAKE_BINARY_DIR}")
else()
    set(_tree "${CMAKE_BINARY_DIR}/deb-tree")
endif()
set(CPACK_INSTALL_CMAKE_PROJECTS "${_tree};ringd;ALL;/")
# Where dpkg-shlibdeps finds libringd.so.0 (built, not installed) for ringctl.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS "${_tree}/client")
if(NOT RINGD_DEB_TREE)
    set(CPACK_RINGD_SOURCE_DIR "${CMAKE_SOURCE_DIR}")
    set(CPACK_RINGD_DEB_TREE "${CMAKE_BINARY_DIR}/deb-tree")
    set(CPACK_RINGD_GENERATOR "${CMAKE_GENERATOR}")
    set(CPACK_PROJECT_CONFIG_FILE "${CMAKE_CURRENT_LIST_DIR}/deb-tree.cmake")
endif()
include(CPack)
