# deb-tree.cmake - run by cpack (CPACK_PROJECT_CONFIG_FILE) in a build tree
# that is not configured for packages: (re)configures the tree that is,
# deb-tree/, which cpack then builds and installs (package.cmake says why).
if(NOT CPACK_GENERATOR STREQUAL "DEB")
    return()
endif()
# Debian's hardening flags, bindnow included (hardening=+all).
set(ENV{DEB_BUILD_MAINT_OPTIONS} "hardening=+all")
foreach(what CFLAGS CXXFLAGS CPPFLAGS LDFLAGS)
    execute_process(COMMAND dpkg-buildflags --get ${what}
        WORKING_DIRECTORY ${CPACK_RINGD_SOURCE_DIR}
        OUTPUT_VARIABLE ${what} OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "ringd: dpkg-buildflags failed: install dpkg-dev (deploy/install-deps.sh)")
    endif()
endforeach()
# The torch.distributed backend where the tree that runs cpack found that it
# can be built (deploy/CMakeLists.txt), and then it must be.
# (cpack runs this file without the project's policies: no IN_LIST.)
list(FIND CPACK_COMPONENTS_ALL torch _i)
if(_i EQUAL -1)
    set(_torch OFF)
else()
    set(_torch ON)
endif()
message(STATUS "ringd: configuring ${CPACK_RINGD_DEB_TREE} for the packages (prefix /usr)")
execute_process(
    COMMAND ${CMAKE_COMMAND} -S ${CPACK_RINGD_SOURCE_DIR} -B ${CPACK_RINGD_DEB_TREE}
        -G ${CPACK_RINGD_GENERATOR}
        -DCMAKE_BUILD_TYPE=RelWithDebInfo
        -DCMAKE_INSTALL_PREFIX=/usr
        -DCMAKE_SKIP_INSTALL_RPATH=ON
        "-DCMAKE_C_FLAGS=${CFLAGS} ${CPPFLAGS}"
        "-DCMAKE_CXX_FLAGS=${CXXFLAGS} ${CPPFLAGS}"
        "-DCMAKE_EXE_LINKER_FLAGS=${LDFLAGS}"
        "-DCMAKE_SHARED_LINKER_FLAGS=${LDFLAGS}"
        "-DCMAKE_MODULE_LINKER_FLAGS=${LDFLAGS}"
        -DRINGD_DEB_TREE=ON
        -DRINGD_DEBIAN_DOCS=ON
        -DRINGD_TESTS=OFF
        -DRINGD_WERROR=OFF
        -DRINGD_SANITIZE=OFF
        -DRINGD_TORCH=${_torch}
    OUTPUT_QUIET
    RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "ringd: cannot configure ${CPACK_RINGD_DEB_TREE} (see above)")
endif()
