# Layer include paths (see CONVENTIONS in CONTRIBUTING.md): each layer's
# object library includes one staging folder, build/layers/<layer>, that
# links to the source folders (or single headers) the layer may include.
# Everything else, the layers above it in particular, is simply not there.

# What each layer may include, as paths under the source tree.
set(SHS_LAYER_SEES_runtime    runtime)
set(SHS_LAYER_SEES_transport  runtime transport)
set(SHS_LAYER_SEES_algorithms runtime algorithms transport/services.h)
# Layers that may not touch verbs: their <infiniband/verbs.h> and
# <rdma/rdma_cma.h> are an #error.
set(SHS_LAYER_NO_VERBS runtime algorithms)

function(shs_layer_includes target layer)
  set(stage ${CMAKE_BINARY_DIR}/layers/${layer})
  file(REMOVE_RECURSE ${stage})
  foreach(path ${SHS_LAYER_SEES_${layer}})
    get_filename_component(parent ${stage}/${path} DIRECTORY)
    file(MAKE_DIRECTORY ${parent})
    file(CREATE_LINK ${CMAKE_SOURCE_DIR}/${path} ${stage}/${path} SYMBOLIC)
  endforeach()
  if(layer IN_LIST SHS_LAYER_NO_VERBS)
    foreach(h infiniband/verbs.h rdma/rdma_cma.h rdma/rdma_verbs.h)
      file(WRITE ${stage}/${h}
        "#error \"${layer}/ may not use verbs: only transport/ talks to the device (layer rule)\"\n")
    endforeach()
  endif()
  target_include_directories(${target} BEFORE PRIVATE ${stage})
endfunction()
