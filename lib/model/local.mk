# lib/model: layer specs, the spec-file parser, the model graph, initialisation.
libcdl_base_la_SOURCES += lib/model/layer.c lib/model/spec.c lib/model/spec_compare.c lib/model/builtin.c \
	lib/model/builtin_resnet.c lib/model/infer.c lib/model/model.c lib/model/run.c lib/model/init.c \
	lib/model/model_internal.h lib/model/graph.h
