# Run by `cmake --install` (CMakeLists.txt sets the SEGD_PC_* variables
# before it): writes segd-cache.pc and segd-tail.pc for the prefix being
# installed to, CMAKE_INSTALL_PREFIX here (also when given as --prefix), and
# installs them in <libdir>/pkgconfig. Paths are absolute, ${prefix}-based
# where GNUInstallDirs' directory is relative: pkg-config then drops the
# system's own -I/usr/include, and finds a DESTDIR copy with
# PKG_CONFIG_SYSROOT_DIR. (The old ${pcfiledir}/../.. was wrong wherever
# libdir is two levels deep, lib/x86_64-linux-gnu under /usr on Debian.)
set(SEGD_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
foreach(dir LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${SEGD_PC_${dir}}")
    set(SEGD_PC_FULL_${dir} "${SEGD_PC_${dir}}")
    set(SEGD_PC_VALUE_${dir} "${SEGD_PC_${dir}}")
  else()
    set(SEGD_PC_FULL_${dir} "${CMAKE_INSTALL_PREFIX}/${SEGD_PC_${dir}}")
    set(SEGD_PC_VALUE_${dir} "\${prefix}/${SEGD_PC_${dir}}")
  endif()
endforeach()
foreach(pc segd-cache segd-tail)
  configure_file("${SEGD_PC_SRC}/${pc}.pc.in" "${SEGD_PC_BIN}/${pc}.pc" @ONLY)
  file(INSTALL "${SEGD_PC_BIN}/${pc}.pc" DESTINATION "${SEGD_PC_FULL_LIBDIR}/pkgconfig")
endforeach()
