#----------------------------------------------------------------
# Generated CMake target import file for configuration "Release".
#----------------------------------------------------------------

# Commands may need to know the format version.
set(CMAKE_IMPORT_FILE_VERSION 1)

# Import target "qg::core" for configuration "Release"
set_property(TARGET qg::core APPEND PROPERTY IMPORTED_CONFIGURATIONS RELEASE)
set_target_properties(qg::core PROPERTIES
  IMPORTED_LINK_INTERFACE_LANGUAGES_RELEASE "CXX"
  IMPORTED_LOCATION_RELEASE "${_IMPORT_PREFIX}/lib/libqg_core.a"
  )

list(APPEND _cmake_import_check_targets qg::core )
list(APPEND _cmake_import_check_files_for_qg::core "${_IMPORT_PREFIX}/lib/libqg_core.a" )

# Commands beyond this point should not need to know the version.
set(CMAKE_IMPORT_FILE_VERSION)
